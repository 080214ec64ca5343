#!/bin/bash
# Before/after A/B of the fused batch norm + ReLU and the layout-keeping shortcut (session 14).
# OLD: a stalepipe built at 1802517 (before); NEW: one built at f0fd36b or later. Run from the
# repository root with nothing else running. Two parts, 30 steps of 128 synthetic images per run:
#  - one thread: OLD and NEW train at the same time, each pinned to its own core (taskset), so
#    whatever slows the machine in that minute slows both; cores swapped every round.
#  - the 2-worker pipeline (--partitions 2 --threads 2): OLD and NEW alternated.
# Writes ab-<model>.csv: round,config,old,new,new/old (images/s from summary.json).
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${OLD:?set OLD to a stalepipe built at 1802517}"
NEW=${NEW:-build/apps/stalepipe/stalepipe}
MODEL=${1:-resnet20}; ROUNDS=${2:-4}; STEPS=${STEPS:-30}
CSV=results/bench/session14/ab-$MODEL.csv
T=$(mktemp -d)
train() {  # cores binary out-dir flags...
  local cores=$1 bin=$2 out=$3; shift 3
  rm -rf "$out"
  taskset -c "$cores" "$bin" train --model "$MODEL" --layout channels-last --data synthetic:$((STEPS * 128)) --test-subset 128 \
    --epochs 1 --max-steps "$STEPS" --progress none --out "$out" "$@" > /dev/null 2>&1
}
ips() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1] + '/summary.json'))['images_per_second'], 1))" "$1"; }
echo "round,config,old,new,new/old" > "$CSV"
for r in $(seq "$ROUNDS"); do
  c=$((r % 2))
  train $c "$OLD" "$T/old" --pipeline none --threads 1 &
  train $((1 - c)) "$NEW" "$T/new" --pipeline none --threads 1 &
  wait
  o=$(ips "$T/old"); n=$(ips "$T/new")
  echo "$r,1thread-paired,$o,$n,$(python3 -c "print(round($n / $o, 3))")" | tee -a "$CSV"
  train 0,1 "$OLD" "$T/old" --partitions 2 --threads 2; o=$(ips "$T/old")
  train 0,1 "$NEW" "$T/new" --partitions 2 --threads 2; n=$(ips "$T/new")
  echo "$r,pipeline-k2,$o,$n,$(python3 -c "print(round($n / $o, 3))")" | tee -a "$CSV"
done
rm -rf "$T"
