#!/usr/bin/env bash
# What training a scripted network through stalepipe costs against PyTorch's own loop over the
# same file, in the steady state: `stalepipe train --model-file FILE --pipeline none` for two
# epochs of STEPS steps on a folder of generated photos (3xSxS, 10 classes), its rate the second
# epoch's (training only, metrics.jsonl), against bench/script_peer.py (torch.jit.load(FILE), the
# same SGD, loss, batch, threads and layout on one batch in memory, STEPS steps of warm-up and
# STEPS timed). A constant lr keeps both from diverging, which slows a CPU with denormals. The
# two alternate round by round, so that a machine whose speed drifts slows both sides of a
# ratio alike. Prints each round and the median ratio stalepipe / PyTorch per file.
#   bench/script_vs_pytorch.sh FILE...
#   env: ROUNDS=5 STEPS=20 BATCH=32 THREADS=2 SIZE=64 LR=0.002 LAYOUT=nchw|channels-last SP=stalepipe
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}
rounds=${ROUNDS:-5} steps=${STEPS:-20} batch=${BATCH:-32} threads=${THREADS:-2} size=${SIZE:-64}
lr=${LR:-0.002} layout=${LAYOUT:-nchw}
(($#)) || { echo "usage: bench/script_vs_pytorch.sh FILE..." >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 10 classes, 1 in 10 held out: an epoch of `steps` mini-batches (the last one dropped or not).
per_class=$(((steps * batch + 8) / 9))
((per_class >= 10)) || per_class=10
/usr/bin/python3 bench/make_photos.py "$work/photos" 10 "$per_class" $((size + size / 8)) $((size + size / 4))

stalepipe_rate() {  # stalepipe_rate FILE: the second epoch's images/s
  local out=$work/run-$RANDOM
  "$SP" train --model-file "$1" --pipeline none --data "folder:$work/photos" --val-fraction 0.1 \
    --image-size "$size" --batch-size "$batch" --epochs 2 --lr "$lr" --lr-schedule constant \
    --layout "$layout" --threads "$threads" --progress none --out "$out" > "$out.log" 2>&1 ||
    { cat "$out.log" >&2; exit 1; }
  /usr/bin/python3 -c "import json, sys; print(f\"{[json.loads(l) for l in open(sys.argv[1])][-1]['images_per_second']:.2f}\")" \
    "$out/metrics.jsonl"
}

echo "file | round | stalepipe img/s | PyTorch img/s | stalepipe / PyTorch"
for file in "$@"; do
  ratios=()
  for r in $(seq "$rounds"); do
    ours=$(stalepipe_rate "$file")
    theirs=$(/usr/bin/python3 bench/script_peer.py "$file" "$batch" "$steps" "$threads" "$size" 10 "$lr" "$layout")
    ratio=$(/usr/bin/python3 -c "print(f'{$ours / $theirs:.3f}')")
    echo "$(basename "$file") | $r | $ours | $theirs | $ratio"
    ratios+=("$ratio")
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")
  echo "$(basename "$file") | median | | | $median"
done
