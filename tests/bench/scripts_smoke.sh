#!/usr/bin/env bash
# The measurement scripts of bench/ in tiny configurations (LeNet-5, a few small mini-batches):
# each must still run against this build, read what stalepipe writes, and print its figures;
# a bad variant must fail. Seconds on 2 cores. Usage: scripts_smoke.sh path/to/stalepipe
set -euo pipefail
sp=$(realpath "$1")
bench=$(realpath "$(dirname "$0")/../../bench")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ab_bench.sh: one build against itself, one round.
out=$(BEFORE=$sp AFTER=$sp "$bench/ab_bench.sh" "$tmp/ab" lenet5 1 10 1 --pipeline 2 --batch-size 16 --threads 2)
grep -q '^median one_thread [0-9.]* all_threads [0-9.]* pipeline [0-9.]* side_by_side [0-9.]*$' <<< "$out" ||
  fail "ab_bench.sh printed no medians: $out"
[ -s "$tmp/ab/lenet5-after-1.json" ] || fail "ab_bench.sh wrote no JSON"

# ab_train.sh: two variants, one of them on an explicit binary; then a variant that cannot train.
SP=$sp STEPS=4 BATCH=16 "$bench/ab_train.sh" "$tmp/ab.csv" 1 "plain=--model lenet5 --pipeline none --threads 1" \
  "pipe@$sp=--model lenet5 --pipeline 2 --threads 2" > /dev/null
[ "$(head -1 "$tmp/ab.csv")" = "round,variant,images_per_second,peak_rss_mb" ] || fail "ab_train.sh header"
grep -Eq '^1,plain,[0-9.]+,[0-9.]+$' "$tmp/ab.csv" && grep -Eq '^1,pipe,[0-9.]+,[0-9.]+$' "$tmp/ab.csv" ||
  fail "ab_train.sh rows: $(cat "$tmp/ab.csv")"
if SP=$sp STEPS=3 BATCH=16 "$bench/ab_train.sh" "$tmp/bad.csv" 1 "bad=--model nosuch" > /dev/null 2>&1; then
  fail "ab_train.sh accepted a run that failed"
fi

# ppv_sweep.sh and steady_period.py: two cuts of LeNet-5.
out=$(SP=$sp MODEL=lenet5 PPVS="1 2" STEPS=10 BATCH=16 "$bench/ppv_sweep.sh" --threads 2)
[ "$(grep -Ec '^PPV [12]: steal -?[0-9]+ ticks, period [0-9.]+ ms  [0-9.]+ img/s  compute per mini-batch' <<< "$out")" = 2 ] ||
  fail "ppv_sweep.sh: $out"

# self_times.py on a trace whose numbers are known: a 10 us op with a 4 us op inside, 2 steps.
cat > "$tmp/trace.json" <<'JSON'
[{"ph": "X", "name": "outer", "ts": 0, "dur": 10, "tid": 1},
 {"ph": "X", "name": "inner", "ts": 3, "dur": 4, "tid": 1},
 {"ph": "X", "name": "outer", "ts": 20, "dur": 10, "tid": 1}]
JSON
out=$(python3 "$bench/self_times.py" "$tmp/trace.json" 2)
grep -q '^total 0.0 ms per step over 2 steps' <<< "$out" || fail "self_times.py total: $out"
[ "$(sed -n 2p <<< "$out" | awk '{print $1, $5}')" = "0.01 outer" ] || fail "self_times.py: outer's self time 16 us / 2 steps: $out"
[ "$(sed -n 3p <<< "$out" | awk '{print $3, $5}')" = "20.0% inner" ] || fail "self_times.py: inner's share: $out"

# pytorch_trace.py needs PyTorch (scripts/setup-peers.sh), which CI does not install.
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 "$bench/pytorch_trace.py" lenet5 "$tmp/pytorch.json"
  # Read whole first: grep -q would stop at the first match and break the writer's pipe.
  out=$(python3 "$bench/self_times.py" "$tmp/pytorch.json")
  grep -q 'convolution' <<< "$out" || fail "pytorch_trace.py: no convolution"
else
  echo "pytorch_trace.py: skipped (no PyTorch for /usr/bin/python3)"
fi
# loader_speed.sh needs torchvision and PIL (scripts/setup-peers.sh), which CI does not install.
if /usr/bin/python3 -c "import torchvision, PIL" 2> /dev/null; then
  out=$(SP=$sp SIZES=32 IMAGES=10 BATCH=8 BATCHES=2 THREADS=1 "$bench/loader_speed.sh" "$tmp/loader" 1)
  grep -Eq '^median 32x32: stalepipe [0-9]+ img/s, torchvision [0-9]+ img/s, ratio [0-9.]+$' <<< "$out" ||
    fail "loader_speed.sh: $out"
  [ "$(wc -l < "$tmp/loader/loader_speed.csv")" = 3 ] || fail "loader_speed.sh wrote no rows"
else
  echo "loader_speed.sh: skipped (no torchvision for /usr/bin/python3)"
fi
echo "bench scripts ok"
