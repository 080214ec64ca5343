#!/usr/bin/env bash
# The build before the hand-written 2x2 max pooling (e651391) against one with it (439cd10),
# alternated round by round: `stalepipe bench --rounds 1` of each, ROUNDS times per model.
#   BEFORE=... AFTER=... results/bench/session18/maxpool/ab.sh MODEL ROUNDS STEPS WARMUP [BENCH FLAGS...]
# With SKIP_RUNS=1 it only prints the table from the JSON files already there.
set -euo pipefail
out=$(dirname "$0")
model=$1 rounds=$2 steps=$3 warmup=$4
shift 4
for r in $(seq "$rounds"); do
  [ "${SKIP_RUNS:-0}" = 1 ] && break
  for side in before after; do
    bin=$([ "$side" = before ] && echo "$BEFORE" || echo "$AFTER")
    "$bin" bench --model "$model" --rounds 1 --steps "$steps" --warmup-steps "$warmup" "$@" \
      --json "$out/$model-$side-$r.json" > /dev/null
  done
done
/usr/bin/python3 - "$out" "$model" "$rounds" <<'PY'
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
