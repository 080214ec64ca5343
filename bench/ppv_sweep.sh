#!/usr/bin/env bash
# A 2-worker pipeline's steady period at several cuts, from a trace of STEPS mini-batches each
# (synthetic data, threads executor; bench/steady_period.py reads the trace). One line per run,
# with the CPU time the hypervisor stole meanwhile (a VM's noise). Run on a quiet machine.
#   MODEL=resnet56 PPVS="21 23 25 27 29" bench/ppv_sweep.sh [TRAIN FLAGS...]
# env: SP (default build/apps/stalepipe/stalepipe), MODEL (resnet56), PPVS (21 23 25 27 29),
# STEPS (22, at least 10), BATCH (128). Extra arguments go to train (default: --threads 2
# --layout channels-last).
set -euo pipefail
here=$(dirname "$0")
SP=${SP:-build/apps/stalepipe/stalepipe}
model=${MODEL:-resnet56} steps=${STEPS:-22} batch=${BATCH:-128}
[ "$steps" -ge 10 ] || { echo "$0: STEPS must be >= 10 (the steady state skips the first 6 and last 3)" >&2; exit 2; }
[ $# -gt 0 ] || set -- --threads 2 --layout channels-last
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
for P in ${PPVS:-21 23 25 27 29}; do
  rm -rf "$run/out"
  s0=$(awk '/^cpu /{print $9}' /proc/stat)
  "$SP" train --model "$model" --data "synthetic:$((steps * batch))" --batch-size "$batch" --pipeline "$P" \
    --max-steps "$steps" --epochs 1 --progress none --test-subset "$batch" --trace "$run/trace.json" \
    --out "$run/out" "$@" > /dev/null 2> "$run/err" || { echo "$0: PPV $P failed: $(tail -1 "$run/err")" >&2; exit 1; }
  stolen=$(( $(awk '/^cpu /{print $9}' /proc/stat) - s0 ))
  echo "PPV $P: steal $stolen ticks, $(python3 "$here/steady_period.py" "$run/trace.json" "$steps" "$batch")"
done
