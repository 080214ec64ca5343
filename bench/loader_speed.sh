#!/usr/bin/env bash
# The input pipeline alone against torchvision's: photo-sized JPEGs (500x375, made here),
# RandomResizedCrop to each size in SIZES, flipped and normalised, THREADS decode threads
# against as many DataLoader workers, rounds alternated. Prints each round and the medians
# with their ratio; writes OUT/loader_speed.csv.
# Usage: bench/loader_speed.sh OUT [ROUNDS]   (env: SP=stalepipe binary, SIZES="224 64",
#        THREADS=2, BATCH=64, BATCHES=20, IMAGES=150 per class of 10)
# Needs python3-torchvision and python3-pil (scripts/setup.sh installs them).
set -euo pipefail
out=$1
rounds=${2:-3}
sp=${SP:-build/apps/stalepipe/stalepipe}
sizes=${SIZES:-224 64}
threads=${THREADS:-2}
batch=${BATCH:-64}
batches=${BATCHES:-20}
here=$(dirname "$0")
mkdir -p "$out"
photos=$out/photos
if [ ! -d "$photos/class0" ]; then
  /usr/bin/python3 "$here/make_photos.py" "$photos" 10 "${IMAGES:-150}"
fi
csv=$out/loader_speed.csv
echo "round,size,loader,images_per_second" > "$csv"
rate() { grep -Eo '[0-9.]+ img/s' <<< "$1" | head -1 | cut -d' ' -f1; }
for round in $(seq 1 "$rounds"); do
  for size in $sizes; do
    ours=$("$sp" data speed --data "folder:$photos" --val-fraction 0.1 --image-size "$size" --resized-crop \
      --data-threads "$threads" --batch-size "$batch" --batches "$batches")
    peer=$(/usr/bin/python3 "$here/loader_peer.py" "$photos" --image-size "$size" --resized-crop \
      --workers "$threads" --batch-size "$batch" --batches "$batches")
    echo "round $round, $size: $ours | $peer"
    echo "$round,$size,stalepipe,$(rate "$ours")" >> "$csv"
    echo "$round,$size,torchvision,$(rate "$peer")" >> "$csv"
  done
done
/usr/bin/python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for size in dict.fromkeys(r["size"] for r in rows):
    med = {who: statistics.median(float(r["images_per_second"]) for r in rows if r["size"] == size and r["loader"] == who)
           for who in ("stalepipe", "torchvision")}
    print(f"median {size}x{size}: stalepipe {med['stalepipe']:.0f} img/s, torchvision {med['torchvision']:.0f} img/s, "
          f"ratio {med['stalepipe'] / med['torchvision']:.2f}")
PY
