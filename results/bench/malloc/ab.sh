#!/bin/bash
# Interleaved A/B: glibc default malloc (build a698e89) vs keep_freed_memory (HEAD); ResNet-56, channels-last,
# 30 steps of 128 synthetic images per run; images/s of training from summary.json, minor faults from perf.
# OLD: a stalepipe built at a698e89 (before keep_freed_memory); run from the repository root, nothing else running.
cd "$(dirname "$0")/../../.."
OUT=results/bench/malloc; mkdir -p $OUT
echo "run,variant,config,images_per_second,page_faults,system_time_ns" > $OUT/ab.csv
for r in 1 2 3 4 5; do
  for config in "1thread:--pipeline none --threads 1" "pipeline:--partitions 2 --threads 2"; do
    name=${config%%:*}; flags=${config#*:}
    for v in default kept; do
      SP=build/apps/stalepipe/stalepipe; [ $v = default ] && SP=${OLD:?set OLD to a stalepipe built at a698e89}
      rm -rf /tmp/ab-run
      stats=$(perf stat -x, -e page-faults,system_time $SP train --model resnet56 $flags --layout channels-last \
        --data synthetic:3840 --test-subset 128 --epochs 1 --batch-size 128 --progress none --out /tmp/ab-run 2>&1 >/dev/null)
      faults=$(echo "$stats" | grep page-faults | cut -d, -f1)
      sys=$(echo "$stats" | grep system_time | cut -d, -f1)
      ips=$(python3 -c "import json; print(round(json.load(open('/tmp/ab-run/summary.json'))['images_per_second'], 1))")
      echo "$r,$v,$name,$ips,$faults,$sys" | tee -a $OUT/ab.csv
    done
  done
done
