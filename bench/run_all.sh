#!/usr/bin/env bash
# The complete speed and memory measurement behind docs/performance.md.
#
# Run on a quiet machine (nothing else compiling or training), from the repository root:
#     scripts/setup.sh && scripts/build.sh && bench/run_all.sh
# Writes under results/bench/ (or $OUT):
#     <model>-k2.json/.txt      stalepipe bench, 2 partitions balanced by time, + processes executor
#     <model>-paper.json/.txt   stalepipe bench, the paper's placement (LeNet-5: 2; ResNet: 2n+1)
#     peers-<model>-{k2,paper}.json/.txt   bench/peers.py (PyTorch plain and Pipe, same partitions)
#     memory-<model>.json/.txt  stalepipe memory (Table 9: LeNet-5 2, AlexNet 3, VGG-16 2, ResNet-20 7)
#     memory-<model>-k2.json/.txt   stalepipe memory of the balanced K=2 cut (MEMK2, default resnet56)
#     <model>-k2-recompute.json/.txt, memory-<model>-k2-recompute.json/.txt   the same with --recompute
#                               (RECOMPUTE, default resnet56:9: its balanced cut recomputing through layer 9)
#     bench_channel.json, bench_executors.json   the Google Benchmark micro-benchmarks
#     table.md                  the side-by-side tables for docs/performance.md
#     machine.txt               CPU, load before and after, versions
# ResNet-110 dominates the time (each configuration trains 3 + 20 mini-batches of 128).
# Environment: SP (the stalepipe binary), OUT (folder), STEPS (measured steps, default 20), WARMUP (default 3), BATCH
# (default 128), ROUNDS (alternated rounds of every configuration, bench and peers, medians
# reported; default 1), SPECS (model:paper-PPV list), MEMK2 (models list; empty: none), MEMSPECS (model:PPV:channels list; empty: none),
# RECOMPUTE (model:layer list; empty: none),
# PLACEMENTS (default "k2 paper"; "k2" alone where the balanced cut is the paper's),
# SKIP_PEERS=1 (no PyTorch), SKIP_PROCESSES=1 (no processes executor), SKIP_MICRO=1.
# A smoke test of the script itself (a minute; numbers meaningless):
#     OUT=/tmp/smoke BATCH=16 STEPS=10 WARMUP=1 SPECS=lenet5:2 MEMSPECS=lenet5:2:1 SKIP_MICRO=1 bench/run_all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}  # another binary: e.g. a copy frozen while the tree is rebuilt
OUT=${OUT:-results/bench}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
BATCH=${BATCH:-128}
ROUNDS=${ROUNDS:-1}
SPECS=${SPECS-"lenet5:2 resnet20:7 resnet56:19 resnet110:37"}  # set but empty: none
MEMK2=${MEMK2-"resnet56"}  # models whose balanced K=2 cut also gets `stalepipe memory`
MEMSPECS=${MEMSPECS-"lenet5:2:1 alexnet:3:3 vgg16:2:3 resnet20:7:3"}
RECOMPUTE=${RECOMPUTE-"resnet56:9"}  # model:layer: its balanced K=2 cut again, recomputing
PLACEMENTS=${PLACEMENTS:-"k2 paper"}
for placement in $PLACEMENTS; do
  [[ $placement == k2 || $placement == paper ]] ||
    { echo "run_all: PLACEMENTS=\"$PLACEMENTS\": expected k2 and/or paper, got $placement" >&2; exit 2; }
done
[[ -x $SP ]] || { echo "run_all: $SP is missing; run scripts/build.sh first" >&2; exit 2; }
if [[ -z ${SKIP_PEERS:-} ]] && ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "run_all: PyTorch is missing; run scripts/setup.sh first (or SKIP_PEERS=1)" >&2
  exit 2
fi
mkdir -p "$OUT"

# Appended, one block per invocation: a partial rerun (SPECS=resnet110:37 MEMSPECS=) keeps the
# record of the runs behind the other files.
{
  echo "--- SPECS=\"$SPECS\" MEMSPECS=\"$MEMSPECS\" PLACEMENTS=\"$PLACEMENTS\" STEPS=$STEPS WARMUP=$WARMUP BATCH=$BATCH ROUNDS=$ROUNDS"
  echo "date: $(date -Is)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), binary: $SP"
} >> "$OUT/machine.txt"

processes=(--processes)
[[ -n ${SKIP_PROCESSES:-} ]] && processes=()

# model, the paper's PPV (LeNet-5: Table 9's; ResNet-(6n+2): 2n+1)
for spec in $SPECS; do
  model=${spec%%:*}
  paper=${spec##*:}
  if [[ " $PLACEMENTS " == *" k2 "* ]]; then
    echo "== $model: 2 partitions balanced by time" >&2
    $SP bench --model "$model" --partitions 2 --balance time --batch-size "$BATCH" --warmup-steps "$WARMUP" --steps "$STEPS" \
      --rounds "$ROUNDS" "${processes[@]}" --json "$OUT/$model-k2.json" | tee "$OUT/$model-k2.txt"
    if [[ " $MEMK2 " == *" $model "* ]]; then
      cut=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ppv"])' "$OUT/$model-k2.json")
      echo "== memory: $model, the balanced cut --pipeline $cut" >&2
      $SP memory --model "$model" --pipeline "$cut" --batch-size "$BATCH" \
        --json "$OUT/memory-$model-k2.json" | tee "$OUT/memory-$model-k2.txt"
    fi
    for spec_rc in $RECOMPUTE; do
      [[ ${spec_rc%%:*} == "$model" ]] || continue
      layer=${spec_rc##*:}
      echo "== $model: 2 partitions balanced by time, recomputing through layer $layer" >&2
      $SP bench --model "$model" --partitions 2 --balance time --recompute "$layer" --batch-size "$BATCH" \
        --warmup-steps "$WARMUP" --steps "$STEPS" --rounds "$ROUNDS" --json "$OUT/$model-k2-recompute.json" \
        | tee "$OUT/$model-k2-recompute.txt"
      cut=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ppv"])' "$OUT/$model-k2-recompute.json")
      $SP memory --model "$model" --pipeline "$cut" --recompute "$layer" --batch-size "$BATCH" \
        --json "$OUT/memory-$model-k2-recompute.json" | tee "$OUT/memory-$model-k2-recompute.txt"
    done
  fi
  if [[ " $PLACEMENTS " == *" paper "* ]]; then
    echo "== $model: the paper's placement --pipeline $paper" >&2
    $SP bench --model "$model" --pipeline "$paper" --batch-size "$BATCH" --warmup-steps "$WARMUP" --steps "$STEPS" \
      --rounds "$ROUNDS" --json "$OUT/$model-paper.json" | tee "$OUT/$model-paper.txt"
  fi
  if [[ -z ${SKIP_PEERS:-} ]]; then
    for placement in $PLACEMENTS; do
      echo "== $model: PyTorch peers, partitions of $model-$placement" >&2
      /usr/bin/python3 bench/peers.py --stalepipe-json "$OUT/$model-$placement.json" \
        --warmup-steps "$WARMUP" --steps "$STEPS" --rounds "$ROUNDS" --json "$OUT/peers-$model-$placement.json" \
        | tee "$OUT/peers-$model-$placement.txt"
    done
  fi
done

# Table 9: LeNet-5 on MNIST-like data (1 channel), the others on CIFAR-10 (3 channels).
for spec in $MEMSPECS; do
  IFS=: read -r model ppv channels <<< "$spec"
  echo "== memory: $model --pipeline $ppv" >&2
  $SP memory --model "$model" --pipeline "$ppv" --channels "$channels" --batch-size "$BATCH" \
    --json "$OUT/memory-$model.json" | tee "$OUT/memory-$model.txt"
done

if [[ -z ${SKIP_MICRO:-} && -x build/bench/bench_channel ]]; then
  build/bench/bench_channel --benchmark_out="$OUT/bench_channel.json" --benchmark_out_format=json
  build/bench/bench_executors --benchmark_out="$OUT/bench_executors.json" --benchmark_out_format=json
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
/usr/bin/python3 bench/tables.py "$OUT" > "$OUT/table.md"
cat "$OUT/table.md"
