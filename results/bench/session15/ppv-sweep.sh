#!/usr/bin/env bash
# ResNet-56, 2 workers: the pipeline's steady period at several cuts, from a trace of 22
# mini-batches each (synthetic data, channels-last, threads executor on the 2 cores).
# Run from the repository root on a quiet machine; prints one line per run.
set -euo pipefail
SP=build/apps/stalepipe/stalepipe
for P in ${PPVS:-21 23 25 27 29 29 25 23 27 21 23 25}; do  # ppv-sweep.txt: two invocations
  rm -rf /tmp/ppv-sweep
  s0=$(awk '/^cpu /{print $9}' /proc/stat)
  echo -n "PPV $P: "
  $SP train --model resnet56 --data synthetic:4096 --pipeline "$P" --max-steps 22 --layout channels-last \
    --threads 2 --progress none --test-subset 128 --trace /tmp/ppv-sweep.json --out /tmp/ppv-sweep >/dev/null 2>&1
  echo -n "steal $(( $(awk '/^cpu /{print $9}' /proc/stat) - s0 )) ticks, "
  python3 "$(dirname "$0")/steady_period.py" /tmp/ppv-sweep.json 22
done
