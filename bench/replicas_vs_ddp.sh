#!/usr/bin/env bash
# Data parallelism side by side: `stalepipe train --replicas R --pipeline none --executor
# processes` (R ranks, one intra-op thread each) against PyTorch DDP over Gloo
# (bench/ddp_peer.py: R processes, one thread each), same model, global batch and layout,
# alternated round by round. Prints each round's images/s and the medians with their ratio:
#   median stalepipe 905.0 ddp 760.3 ratio 1.19
#   bench/replicas_vs_ddp.sh CSV ROUNDS MODEL [R] [BATCH] [STEPS] [LAYOUT]
# env: SP (default build/apps/stalepipe/stalepipe), PYTHON (default /usr/bin/python3: needs torch).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 CSV ROUNDS MODEL [R] [BATCH] [STEPS] [LAYOUT]" >&2; exit 2; }
csv=$1 rounds=$2 model=$3 replicas=${4:-2} batch=${5:-128} steps=${6:-40} layout=${7:-nchw}
sp=${SP:-build/apps/stalepipe/stalepipe} python=${PYTHON:-/usr/bin/python3}
here=$(dirname "$0")
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
echo "round,variant,images_per_second" > "$csv"
for r in $(seq "$rounds"); do
  rm -rf "$run/out"
  "$sp" launch --nproc "$replicas" -- train --model "$model" --data "synthetic:$((steps * batch))" --test-subset 64 \
    --batch-size "$batch" --pipeline none --replicas "$replicas" --executor processes --threads "$replicas" \
    --threads-per-worker 1 --layout "$layout" --epochs 1 --max-steps "$steps" --progress none --out "$run/out" \
    > "$run/log" 2>&1 || { echo "$0: stalepipe failed: $(tail -1 "$run/log")" >&2; exit 1; }
  ours=$("$python" -c "import json, sys; print(round(json.load(open(sys.argv[1]))['images_per_second'], 1))" "$run/out/summary.json")
  theirs=$("$python" "$here/ddp_peer.py" --model "$model" --replicas "$replicas" --batch-size "$batch" \
    --steps "$steps" --layout "$layout" | sed -n 's/.*: \([0-9.]*\) img\/s$/\1/p')
  [ -n "$theirs" ] || { echo "$0: ddp_peer.py printed no rate" >&2; exit 1; }
  echo "$r,stalepipe,$ours" | tee -a "$csv"
  echo "$r,ddp,$theirs" | tee -a "$csv"
done
"$python" - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {v: statistics.median(float(r["images_per_second"]) for r in rows if r["variant"] == v) for v in ("stalepipe", "ddp")}
print(f"median stalepipe {med['stalepipe']:.1f} ddp {med['ddp']:.1f} ratio {med['stalepipe'] / med['ddp']:.2f}")
PY
