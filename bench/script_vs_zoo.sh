#!/usr/bin/env bash
# What cutting a TorchScript file costs: torchvision's ResNet-18 scripted by PyTorch and trained
# with --model-file, against the zoo's resnet18 (the same network built from stalepipe's own
# modules), on the same images (3x64x64 from a folder of generated photos), batch, steps and
# threads, not pipelined and cut in two (--partitions 2 --balance flops). The runs alternate
# round by round, so that a machine whose speed drifts slows both sides of a ratio alike; the
# rate is summary.json's images_per_second (training only). Prints each round and the median
# ratio file / zoo per configuration; needs python3-torch and python3-torchvision.
#   bench/script_vs_zoo.sh [ROUNDS=5] [STEPS=40]   # env: SP (the stalepipe binary)
set -euo pipefail
cd "$(dirname "$0")/.."
SP=${SP:-build/apps/stalepipe/stalepipe}
rounds=${1:-5} steps=${2:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/make_photos.py "$work/photos" 10 40 80 72
/usr/bin/python3 bench/torchvision_zoo.py script "$work" resnet18 > /dev/null

rate() {  # rate NAME CONFIG MODEL...: one run's images/s
  local out=$work/run-$1-$2-$RANDOM
  local cut=(--pipeline none)
  [[ $2 == cut ]] && cut=(--partitions 2 --balance flops)
  shift 2
  "$SP" train "$@" "${cut[@]}" --data "folder:$work/photos" --val-fraction 0.1 --image-size 64 --batch-size 32 \
    --max-steps "$steps" --epochs 100 --threads 2 --progress none --out "$out" > "$out.log" 2>&1 ||
    { cat "$out.log" >&2; exit 1; }
  sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$out/summary.json"
}

echo "round | configuration | zoo resnet18 img/s | --model-file resnet18 img/s | file / zoo"
results=()
for r in $(seq "$rounds"); do
  for config in none cut; do
    zoo=$(rate zoo "$config" --model resnet18 --layout nchw)
    file=$(rate file "$config" --model-file "$work/resnet18.pt")
    ratio=$(/usr/bin/python3 -c "print(f'{$file / $zoo:.3f}')")
    echo "$r | $config | $zoo | $file | $ratio"
    results+=("$config $ratio")
  done
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    config, ratio = line.split()
    by.setdefault(config, []).append(float(ratio))
for config, ratios in by.items():
    print(f"median file / zoo, {config}: {statistics.median(ratios):.3f} ({len(ratios)} rounds)")
'
