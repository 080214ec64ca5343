#!/usr/bin/env bash
# The paper's Table 5 (ResNet-56/110/224/362 on 2 GPUs) predicted from profiles taken on one
# device: `stalepipe simulate --paper-table5 DIR` prints the predicted 2-GPU speedup for each
# link preset beside the paper's measured one (docs/design.md, "The 2-GPU prediction").
#   bench/table5_prediction.sh [DIR=results/table5-gpu-profiles]
# With DEVICE set (e.g. DEVICE=cuda:0) it first takes the profiles into DIR on that device:
# `stalepipe profile --channels 3 --batch-size BATCH --device DEVICE --pipeline PPV --json`,
# which also times each of the two partitions as one block (the check of the compute model).
# env: SP (the binary), BATCH (128), WARMUP (3), REPEATS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}
dir=${1:-results/table5-gpu-profiles}
BATCH=${BATCH:-128} WARMUP=${WARMUP:-3} REPEATS=${REPEATS:-5}
if [ -n "${DEVICE:-}" ]; then
  mkdir -p "$dir"
  # The paper's PPVs: 2n+1 for ResNet-(6n+2), the stem and the first residual stage.
  for pair in 56:19 110:37 224:75 362:121; do
    depth=${pair%:*} ppv=${pair#*:}
    "$SP" profile --model "resnet$depth" --channels 3 --batch-size "$BATCH" \
      --warmup "$WARMUP" --repeats "$REPEATS" --device "$DEVICE" --pipeline "$ppv" \
      --json "$dir/resnet$depth.json" > "$dir/resnet$depth.txt"
    echo "profiled resnet$depth on $DEVICE" >&2
  done
fi
"$SP" simulate --paper-table5 "$dir"
