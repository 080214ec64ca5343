#!/usr/bin/env bash
# What training a scripted network through stalepipe costs against PyTorch's own loop over the
# same file: `stalepipe train --model-file FILE --pipeline none` on a folder of generated photos
# (3xSxS, 10 classes; its rate counts training only) against bench/script_peer.py
# (torch.jit.load(FILE), the same SGD, loss, batch, threads and steps, on one batch in memory,
# every step timed from the first on both sides), the two alternated round by round
# so that a machine whose speed drifts slows both sides of a ratio alike. Prints each round and
# the median ratio stalepipe / PyTorch per file.
#   bench/script_vs_pytorch.sh FILE...   # env: ROUNDS=5 STEPS=30 BATCH=32 THREADS=2 SIZE=64 SP=stalepipe
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}
rounds=${ROUNDS:-5} steps=${STEPS:-30} batch=${BATCH:-32} threads=${THREADS:-2} size=${SIZE:-64}
(($#)) || { echo "usage: bench/script_vs_pytorch.sh FILE..." >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/make_photos.py "$work/photos" 10 40 $((size + size / 8)) $((size + size / 4))

stalepipe_rate() {  # stalepipe_rate FILE: one run's images/s (summary.json, training only)
  local out=$work/run-$RANDOM
  "$SP" train --model-file "$1" --pipeline none --data "folder:$work/photos" --val-fraction 0.1 \
    --image-size "$size" --batch-size "$batch" --max-steps "$steps" --epochs 100 --threads "$threads" \
    --progress none --out "$out" > "$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$out/summary.json"
}

echo "file | round | stalepipe img/s | PyTorch img/s | stalepipe / PyTorch"
for file in "$@"; do
  ratios=()
  for r in $(seq "$rounds"); do
    ours=$(stalepipe_rate "$file")
    theirs=$(/usr/bin/python3 bench/script_peer.py "$file" "$batch" "$steps" "$threads" "$size" 10)
    ratio=$(/usr/bin/python3 -c "print(f'{$ours / $theirs:.3f}')")
    echo "$(basename "$file") | $r | $ours | $theirs | $ratio"
    ratios+=("$ratio")
  done
  median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")
  echo "$(basename "$file") | median | | | $median"
done
