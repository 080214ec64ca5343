#!/usr/bin/env bash
# The ratios against PyTorch (docs/performance.md) with ours and PyTorch's runs alternated round by round:
# `stalepipe bench --rounds 1` then `bench/peers.py --rounds 1`, ROUNDS times, so that a machine
# whose speed drifts over minutes (this VM's rounds spread by up to 20%) slows both sides of
# each ratio alike. run_all.sh runs all of ours and then all of PyTorch's, minutes apart.
#   bench/alternate.sh MODEL PPV [ROUNDS=3] [OUT=results/bench/alternate]   # env: SP, STEPS, WARMUP, RECOMPUTE
# Prints, per round and as medians: ours 1 thread / PyTorch best 1 thread, pipeline / PyTorch
# best 1 thread, pipeline / ceiling (two independent one-thread runs at once). With SKIP_RUNS=1
# it only prints them from the JSON files already in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}
model=${1:?usage: bench/alternate.sh MODEL PPV [ROUNDS] [OUT]} ppv=${2:?PPV} rounds=${3:-3}
out=${4:-results/bench/alternate}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-3}  # as in run_all.sh (LeNet-5 there: 200 and 20)
RECOMPUTE=${RECOMPUTE:-0}  # the pipeline's --recompute (the memory target's configuration)
mkdir -p "$out"
for r in $(seq "$rounds"); do
  [ "${SKIP_RUNS:-0}" = 1 ] && break
  "$SP" bench --model "$model" --pipeline "$ppv" --rounds 1 --steps "$STEPS" --warmup-steps "$WARMUP" \
    --recompute "$RECOMPUTE" --json "$out/$model-$r.json" > /dev/null
  /usr/bin/python3 bench/peers.py --stalepipe-json "$out/$model-$r.json" --chunks 1 --rounds 1 \
    --steps "$STEPS" --warmup-steps "$WARMUP" --json "$out/peers-$model-$r.json" > /dev/null
  echo "round $r done" >&2
done
/usr/bin/python3 - "$out" "$model" "$rounds" <<'PY'
import json, statistics, sys
out, model, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for r in range(1, rounds + 1):
    ours = {m["key"]: m["images_per_second"] for m in json.load(open(f"{out}/{model}-{r}.json"))["measurements"]}
    best = json.load(open(f"{out}/peers-{model}-{r}.json"))["best_plain"]["1"]  # NCHW or channels_last
    rows.append((ours["one_thread"], ours["pipeline"], ours["side_by_side"], best))
print(model)
print("round | ours 1 thr | pipeline | ceiling | PyTorch best 1 thr | ours / PyTorch (>= 1.10) | pipeline / PyTorch (>= 2.0) | pipeline / ceiling (>= 0.95)")
ratios = []
for i, (one, pipe, ceil, best) in enumerate(rows, 1):
    ratios.append((one / best, pipe / best, pipe / ceil))
    print(f"{i} | {one:.1f} | {pipe:.1f} | {ceil:.1f} | {best:.1f} | {one / best:.3f} | {pipe / best:.3f} | {pipe / ceil:.3f}")
med = [statistics.median(c) for c in zip(*ratios)]
print(f"median | | | | | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f}")
PY
