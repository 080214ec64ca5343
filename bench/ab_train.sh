#!/usr/bin/env bash
# Variants of `stalepipe train` alternated round by round, so that a machine whose speed drifts
# over minutes slows every variant alike. Each run trains STEPS mini-batches of BATCH images
# (synthetic: one epoch; or of DATA, a --data spec, which a variant's own --data overrides) and
# adds one CSV row: round, variant, images/s and peak RSS (MB) from its summary.json. A
# variant is NAME=FLAGS, or NAME@BINARY=FLAGS to run another build (an A/B of two commits);
# FLAGS are train's (model, pipeline, threads, layout, recompute, data, ...).
#   bench/ab_train.sh CSV ROUNDS 'none=--model resnet56 --pipeline 25 --threads 2' \
#                                '9=--model resnet56 --pipeline 25 --recompute 9 --threads 2'
# env: SP (default build/apps/stalepipe/stalepipe), STEPS (30), BATCH (128), DATA (synthetic).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 CSV ROUNDS NAME[@BINARY]=FLAGS..." >&2; exit 2; }
csv=$1 rounds=$2
shift 2
steps=${STEPS:-30} batch=${BATCH:-128}
test=$(( steps * batch / 4 < batch ? steps * batch / 4 : batch ))  # synthetic:N has N/4 test images
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
echo "round,variant,images_per_second,peak_rss_mb" > "$csv"
for r in $(seq "$rounds"); do
  for variant in "$@"; do
    head=${variant%%=*} flags=${variant#*=}
    [ "$head" != "$variant" ] || { echo "$0: variant '$variant' is not NAME=FLAGS" >&2; exit 2; }
    name=${head%%@*} bin=${SP:-build/apps/stalepipe/stalepipe}
    [ "$name" = "$head" ] || bin=${head#*@}
    rm -rf "$run/out"
    # shellcheck disable=SC2086  # FLAGS is a list of arguments
    "$bin" train --data "${DATA:-synthetic:$((steps * batch))}" --batch-size "$batch" --test-subset "$test" $flags \
      --epochs 1 --max-steps "$steps" --progress none --out "$run/out" > /dev/null 2> "$run/err" ||
      { echo "$0: run '$name' failed: $(tail -1 "$run/err")" >&2; exit 1; }
    row=$(python3 -c "import json, sys; s = json.load(open(sys.argv[1])); print(round(s['images_per_second'], 1), round(s.get('peak_rss_mb', 0), 1), sep=',')" "$run/out/summary.json")
    echo "$r,$name,$row" | tee -a "$csv"
  done
done
