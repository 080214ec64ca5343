#!/usr/bin/env bash
# Two builds of stalepipe alternated round by round: `stalepipe bench --rounds 1` of the build
# before a change, then of the build after it, ROUNDS times, so that a machine whose speed
# drifts over minutes slows both sides alike; then after / before per round and the medians of
# one thread, all threads, the pipeline and its workers side by side (the ceiling).
#   BEFORE=old/stalepipe AFTER=new/stalepipe bench/ab_bench.sh OUT MODEL ROUNDS STEPS WARMUP [BENCH FLAGS...]
# OUT: the folder for each run's JSON (MODEL-before-R.json, MODEL-after-R.json). With
# SKIP_RUNS=1 it only prints the table from the JSON files already in OUT.
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: BEFORE=... AFTER=... $0 OUT MODEL ROUNDS STEPS WARMUP [BENCH FLAGS...]" >&2; exit 2; }
out=$1 model=$2 rounds=$3 steps=$4 warmup=$5
shift 5
mkdir -p "$out"
for r in $(seq "$rounds"); do
  [ "${SKIP_RUNS:-0}" = 1 ] && break
  for side in before after; do
    bin=$([ "$side" = before ] && echo "${BEFORE:?set BEFORE to the stalepipe before}" || echo "${AFTER:?set AFTER to the stalepipe after}")
    "$bin" bench --model "$model" --rounds 1 --steps "$steps" --warmup-steps "$warmup" "$@" \
      --json "$out/$model-$side-$r.json" > /dev/null
  done
done
python3 - "$out" "$model" "$rounds" <<'PY'
import json, statistics, sys
out, model, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
keys = ["one_thread", "all_threads", "pipeline", "side_by_side"]
print(f"{model}: after / before, per round and median")
ratios = {k: [] for k in keys}
for r in range(1, rounds + 1):
    rate = {s: {m["key"]: m["images_per_second"] for m in json.load(open(f"{out}/{model}-{s}-{r}.json"))["measurements"]}
            for s in ("before", "after")}
    for k in keys:
        ratios[k].append(rate["after"][k] / rate["before"][k])
    print(r, " ".join(f"{k} {rate['before'][k]:.1f} -> {rate['after'][k]:.1f}" for k in keys))
print("median", " ".join(f"{k} {statistics.median(v):.3f}" for k, v in ratios.items()))
PY
