#!/usr/bin/env bash
# Ours against PyTorch's best single core (channels_last), alternated round by round so that the
# machine's drift hits both: `op_profile MODEL - untimed` (stalepipe's PipelineTrainer step, no
# operator timing) then pytorch_rate.py, each on one core with the other core idle.
#   results/bench/session17/profile/one_core_ab.sh resnet110 5 > ab-resnet110.csv
set -euo pipefail
here=$(dirname "$0")
model=$1 rounds=${2:-5}
echo "round,stalepipe,pytorch,ratio"
for r in $(seq "$rounds"); do
  ours=$(taskset -c 0 /tmp/sp-profile/op_profile "$model" /dev/null untimed | awk '/images\/s/ {print $1}')
  theirs=$(taskset -c 0 /usr/bin/python3 "$here/pytorch_rate.py" "$model" | awk '{print $1}')
  echo "$r,$ours,$theirs,$(python3 -c "print(f'{$ours / $theirs:.3f}')")"
done
