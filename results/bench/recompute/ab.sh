#!/bin/bash
# Interleaved A/B of recomputation on the 2-worker ResNet-56 pipeline (channels-last, 2 threads):
# the balanced cut without it (PPV 25) against cuts recomputing through layer L. 30 steps of 128
# synthetic images per run; images/s and peak RSS from summary.json. Run from the repository
# root with nothing else running; ROUNDS (default 5).
cd "$(dirname "$0")/../../.."
OUT=results/bench/recompute; mkdir -p $OUT
SP=build/apps/stalepipe/stalepipe
echo "round,variant,ppv,recompute,images_per_second,peak_rss_mb" > $OUT/ab.csv
for r in $(seq 1 ${ROUNDS:-5}); do
  for variant in 25:0 25:9 23:9 21:21; do
    ppv=${variant%%:*}; layer=${variant##*:}
    rm -rf /tmp/ab-run
    $SP train --model resnet56 --pipeline $ppv --recompute $layer --threads 2 --layout channels-last \
      --data synthetic:3840 --test-subset 128 --epochs 1 --batch-size 128 --progress none --out /tmp/ab-run >/dev/null 2>&1 ||
      { echo "run failed: $variant" >&2; exit 1; }
    row=$(python3 -c "import json; s = json.load(open('/tmp/ab-run/summary.json')); print(round(s['images_per_second'], 1), round(s.get('peak_rss_mb', 0), 1), sep=',')")
    echo "$r,$variant,$ppv,$layer,$row" | tee -a $OUT/ab.csv
  done
done
