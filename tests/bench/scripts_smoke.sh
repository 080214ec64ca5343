#!/usr/bin/env bash
# The measurement scripts of bench/ in tiny configurations (LeNet-5, a few small mini-batches):
# each must still run against this build, read what stalepipe writes, and print its figures;
# a bad variant must fail. Seconds on 2 cores. Usage: scripts_smoke.sh path/to/stalepipe
# PEER_PYTHON: the Python whose PyTorch the peers run on (default /usr/bin/python3; the GPU
# machine's wheel, installed in a virtual environment, rehearses that machine's peers here).
set -euo pipefail
py=${PEER_PYTHON:-/usr/bin/python3}
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

# pytorch_trace.py needs PyTorch (python3-torch, which scripts/setup.sh installs).
if "$py" -c "import torch" 2> /dev/null; then
  "$py" "$bench/pytorch_trace.py" lenet5 "$tmp/pytorch.json"
  # Read whole first: grep -q would stop at the first match and break the writer's pipe.
  out=$(python3 "$bench/self_times.py" "$tmp/pytorch.json")
  grep -q 'convolution' <<< "$out" || fail "pytorch_trace.py: no convolution"
else
  echo "pytorch_trace.py: skipped (no PyTorch for $py)"
fi
# script_vs_pytorch.sh needs Debian's PyTorch and PIL (its peer and photos): a tiny scripted CNN.
if /usr/bin/python3 -c "import torch, PIL" 2> /dev/null; then
  /usr/bin/python3 -c "import torch; from torch import nn; torch.jit.script(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))).save('$tmp/tiny.pt')"
  out=$(SP=$sp ROUNDS=1 STEPS=2 BATCH=4 SIZE=32 "$bench/script_vs_pytorch.sh" "$tmp/tiny.pt")
  grep -Eq '^tiny.pt \| median \| \| \| [0-9.]+$' <<< "$out" || fail "script_vs_pytorch.sh: $out"
fi
# loader_speed.sh needs torchvision and PIL (python3-torchvision, which scripts/setup.sh installs).
if "$py" -c "import torchvision, PIL" 2> /dev/null; then
  out=$(SP=$sp SIZES=32 IMAGES=10 BATCH=8 BATCHES=2 THREADS=1 "$bench/loader_speed.sh" "$tmp/loader" 1)
  grep -Eq '^median 32x32: stalepipe [0-9]+ img/s, torchvision [0-9]+ img/s, ratio [0-9.]+$' <<< "$out" ||
    fail "loader_speed.sh: $out"
  [ "$(wc -l < "$tmp/loader/loader_speed.csv")" = 3 ] || fail "loader_speed.sh wrote no rows"
else
  echo "loader_speed.sh: skipped (no torchvision for $py)"
fi
# The GPU checks' tables (bench/gpu_table.py) on rows whose figures are known.
sw='"cudnn_benchmark": false, "matmul_tf32": false, "cudnn_tf32": false'
ours='"who": "stalepipe", "peer": "resnet56-b128", "precision": "fp32", "config_precision": "fp32"'
graphed='"partitions": [{"device": "cuda:0", "graphed_passes": 300, "eager_passes": 0}, {"device": "cuda:0", "graphed_passes": 300, "eager_passes": 0}]'
cat > "$tmp/speed.jsonl" <<JSON
{$ours, "config": "resnet56-b128-1p", "images_per_second": 100, $sw}
{$ours, "config": "resnet56-b128-1p", "images_per_second": 300, $sw}
{$ours, "config": "resnet56-b128-2p", "images_per_second": 300, $sw, "peak_reserved_bytes": 209715200}
{$ours, "config": "resnet56-b128-2p-graphs", "images_per_second": 750, $sw, $graphed, "peak_reserved_bytes": 314572800}
{"who": "pytorch-eager", "config": "resnet56-b128", "layout": "channels-last", "precision": "fp32", "images_per_second": 100, $sw}
{"who": "pytorch-eager", "config": "resnet56-b128", "layout": "nchw", "precision": "fp32", "images_per_second": 80, $sw}
{"who": "pytorch-compile", "config": "resnet56-b128", "layout": "channels-last", "precision": "fp32", "compile_seconds": 58, "images_per_second": 160, $sw}
{"who": "pytorch-eager", "config": "resnet56-b128", "layout": "channels-last", "precision": "bf16", "images_per_second": 1000, $sw}
JSON
out=$(python3 "$bench/gpu_table.py" speed "$tmp/speed.jsonl" --json "$tmp/speed.json") || fail "gpu_table.py speed failed: $out"
grep -qF '| resnet56-b128-1p | fp32 | 200 | 100 (channels-last) | 2.00 | 160 (channels-last) | 1.25 | 2 | off/off/off; off/off/off |' <<< "$out" ||
  fail "gpu_table.py speed: median 200 against eager's best 100 and compile's 160: $out"
grep -qF 'Two partitions on one GPU against one, ResNet-56 b128, fp32: 1.50x' <<< "$out" || fail "gpu_table.py speed 2p/1p: $out"
grep -q 'torch.compile (reduce-overhead) of resnet56-b128 channels-last fp32: 58 s' <<< "$out" || fail "gpu_table.py compile seconds: $out"
grep -qF -- '--cuda-graphs against without, resnet56-b128-2p, fp32: 2.50x' <<< "$out" || fail "gpu_table.py graphs/eager: $out"
grep -qF '| resnet56-b128-2p | fp32 | 200 | 300 | 1.50 |' <<< "$out" || fail "gpu_table.py peak reserved memory, graphs against eager: $out"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["rows"]) == 8 and j["ratios"][0]["ratio_compile"] == 1.25 and j["memory"][0]["ratio"] == 1.5' \
  "$tmp/speed.json" || fail "gpu_table.py speed --json"
# A -graphs row whose second partition ran nothing as a graph, and a side with other switches: both fail.
{ sed 's/"graphed_passes": 300, "eager_passes": 0}]/"graphed_passes": 0, "eager_passes": 300}]/' "$tmp/speed.jsonl"
  echo "{$ours, \"config\": \"resnet56-b128-1p\", \"images_per_second\": 200, \"cudnn_benchmark\": true, \"matmul_tf32\": false, \"cudnn_tf32\": false}"; } > "$tmp/bad-speed.jsonl"
if out=$(python3 "$bench/gpu_table.py" speed "$tmp/bad-speed.jsonl"); then fail "gpu_table.py speed passed a failed check: $out"; fi
grep -qxF 'FAIL: resnet56-b128-2p-graphs (fp32): --cuda-graphs, but partition(s) 2 ran no pass as a CUDA graph in the timed part (300 eager pass(es))' <<< "$out" ||
  fail "gpu_table.py speed: a -graphs row without graphs: $out"
grep -qF 'FAIL: resnet56-b128-1p (fp32): the switches (cudnn.benchmark/matmul TF32/cuDNN TF32) differ: stalepipe off/off/off, on/off/off, PyTorch off/off/off' <<< "$out" ||
  fail "gpu_table.py speed: switches that differ: $out"
tta_row() {  # WHO CONFIG SEED SECONDS-TO-92 (null: not reached)
  local reached=true; [ "$4" = null ] && reached=false
  echo "{\"who\": \"$1\", \"config\": \"$2\", \"seed\": $3, \"precision\": \"fp32\", \"config_precision\": \"fp32\", \"images_per_second\": 7000, \"test_accuracy\": 0.93, \"time_to_target\": [{\"target\": 85.0, \"reached\": true, \"wall_seconds\": 5}, {\"target\": 92.0, \"reached\": $reached, \"wall_seconds\": $4}]}"
}
{ tta_row stalepipe nonpipelined 1 10; tta_row pytorch-eager pytorch-eager 1 16; tta_row stalepipe nonpipelined 2 10
  tta_row pytorch-eager pytorch-eager 2 16; tta_row stalepipe 2partitions 1 20; tta_row stalepipe 2partitions 2 null; } > "$tmp/tta.jsonl"
out=$(python3 "$bench/gpu_table.py" tta "$tmp/tta.jsonl")
grep -qF 'nonpipelined (fp32) reached 92% 1.60x sooner than the PyTorch eager loop (geometric mean over 2 seed(s); target >= 1.5): pass' <<< "$out" ||
  fail "gpu_table.py tta: 16 s against 10 s on both seeds: $out"
grep -qF '2partitions (fp32) reached 92% 0.80x sooner' <<< "$out" || fail "gpu_table.py tta: a seed that did not reach 92% has no ratio: $out"
grep -qF '| 2 | 2partitions | fp32 | 7000 | 93.00 | 5.0 s | not reached | - |' <<< "$out" || fail "gpu_table.py tta row: $out"
{ for s in 1 2; do
    echo "{\"who\": \"stalepipe\", \"config\": \"nonpipelined\", \"seed\": $s, \"precision\": \"fp32\", \"config_precision\": \"fp32\", \"images_per_second\": 7000, \"test_accuracy\": 0.930}"
    echo "{\"who\": \"stalepipe\", \"config\": \"nonpipelined\", \"seed\": $s, \"precision\": \"bf16\", \"config_precision\": \"fp32\", \"images_per_second\": 14000, \"test_accuracy\": 0.92$((s + 4))}"
  done; } > "$tmp/precision.jsonl"
out=$(python3 "$bench/gpu_table.py" precision "$tmp/precision.jsonl")
grep -qF '| 1 | 93.00 | 92.50 | -0.50 | 7000 | 14000 | 2.00 |' <<< "$out" || fail "gpu_table.py precision row: $out"
grep -qF 'bf16 - fp32, mean over 2 seed(s): -0.45 points (target: within 0.3): MISS; largest single-seed difference 0.50 points' <<< "$out" ||
  fail "gpu_table.py precision: $out"
grep -qF 'warning: nonpipelined (seed 2) asked for bf16 but its config.json records fp32' <<< "$out" ||
  fail "gpu_table.py: a run whose config.json records another precision: $out"
if python3 "$bench/gpu_table.py" tta "$tmp/speed.jsonl" > /dev/null 2>&1; then fail "gpu_table.py tta accepted speed rows"; fi

# The GPU checks' PyTorch peers and scripts/gpu-check.sh's modes, on the CPU (their dry run),
# with $py's PyTorch on tiny IDX data whose label shows.
if "$py" -c "import torch" 2> /dev/null; then
  mkdir -p "$tmp/bin" "$tmp/idx"
  # A wrapper, not a link: a virtual environment's Python finds its packages from its own path.
  printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$py")" > "$tmp/bin/python3"
  chmod +x "$tmp/bin/python3"
  "$py" - "$tmp/idx" <<'PY'
import random, struct, sys
random.seed(1)
for prefix, n in (("train", 512), ("t10k", 200)):
    labels = [random.randrange(10) for _ in range(n)]
    pixels = bytearray()
    for label in labels:  # a bright row whose place is the label, on noise
        pixels += bytes(200 if r == 2 * label + 4 else random.randrange(60) for r in range(28) for _ in range(28))
    open(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 2051, n, 28, 28) + pixels)
    open(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 2049, n) + bytes(labels))
PY
  out=$("$py" "$bench/gpu_peer.py" --device cpu --model lenet5 --batch-size 16 --warmup-steps 2 --seconds 0.2 \
          --precision bf16 --json "$tmp/peer.jsonl")
  grep -Eq '^pytorch eager lenet5 b16 channels-last bf16: [0-9]+ img/s \(cuDNN benchmark False, cuDNN TF32 True, matmul TF32 True, optimizer foreach\)$' <<< "$out" ||
    fail "gpu_peer.py: $out"
  out=$("$py" "$bench/gpu_peer.py" --device cpu --model lenet5 --batch-size 16 --warmup-steps 2 --seconds 0.2 \
          --precision tf32 --cudnn-benchmark)
  grep -Eq '^pytorch eager lenet5 b16 channels-last tf32\+benchmark: [0-9]+ img/s \(cuDNN benchmark True, cuDNN TF32 True, matmul TF32 True, optimizer foreach\)$' <<< "$out" ||
    fail "gpu_peer.py --cudnn-benchmark: $out"
  "$py" -c 'import json,sys; j=json.loads(open(sys.argv[1]).read()); assert j["precision"] == "bf16" and j["compile"] is False and j["cudnn_benchmark"] is False' \
    "$tmp/peer.jsonl" || fail "gpu_peer.py --json: $(cat "$tmp/peer.jsonl")"
  if "$py" -c "import torch, sys; sys.exit(not hasattr(torch, 'compile'))"; then
    out=$("$py" "$bench/gpu_peer.py" --device cpu --model lenet5 --batch-size 16 --warmup-steps 2 --seconds 0.2 --compile 2> /dev/null)
    grep -Eq '^pytorch compile lenet5 b16 channels-last fp32: [0-9]+ img/s \(cuDNN benchmark False, cuDNN TF32 False, matmul TF32 False, optimizer compiled foreach, compiled in [0-9]+ s\)$' <<< "$out" ||
      fail "gpu_peer.py --compile: $out"
  elif out=$("$py" "$bench/gpu_peer.py" --device cpu --model lenet5 --compile 2>&1); then
    fail "gpu_peer.py --compile succeeded without torch.compile"
  else
    grep -qx 'gpu_peer.py: error: --compile needs torch.compile (PyTorch 2.0 or later); this is PyTorch .*' <<< "$out" ||
      fail "gpu_peer.py --compile on PyTorch 1: $out"
  fi
  out=$(printf -- '--model lenet5 --batch-size 8 --warmup-steps 1 --seconds 0.1 --config a\n--model nosuch\n--precision tf32\n' |
        "$py" "$bench/gpu_peer.py" --serve --device cpu 2> /dev/null)
  [ "$(wc -l <<< "$out")" = 3 ] && grep -q '"config": "a"' <<< "$(sed -n 1p <<< "$out")" &&
    grep -q '^{"error"' <<< "$(sed -n 2p <<< "$out")" && grep -q '^{"error": "a request keeps' <<< "$(sed -n 3p <<< "$out")" ||
    fail "gpu_peer.py --serve: one answer a request, bad ones errors: $out"
  # The time-to-accuracy peer: 2 epochs of 16 mini-batches, evaluated every 6 steps and at epoch ends.
  "$py" "$bench/gpu_tta_peer.py" --device cpu --data "$tmp/idx" --model lenet5 --epochs 2 --batch-size 32 \
    --lr 0.05 --eval-every 6 --targets 20,101 --json "$tmp/tta-peer.jsonl" > /dev/null
  "$py" - "$tmp/tta-peer.jsonl" "$tmp/idx/train-images-idx3-ubyte" <<'PY' || fail "gpu_tta_peer.py: $(cat "$tmp/tta-peer.jsonl")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert [e["step"] for e in j["evaluations"]] == [6, 12, 16, 18, 24, 30, 32], j["evaluations"]
assert j["time_to_target"][0]["reached"] and not j["time_to_target"][1]["reached"], j["time_to_target"]
pixels = open(sys.argv[2], "rb").read()[16:]
mean = sum(pixels) / 255 / len(pixels)
assert abs(j["normalization"][0] - mean) < 1e-9, (j["normalization"], mean)
PY
  "$py" - "$bench" <<'PY' || fail "gpu_tta_peer.py: the lr schedule differs from stalepipe's"
import sys, types
sys.path.insert(0, sys.argv[1])
import gpu_tta_peer
args = types.SimpleNamespace(lr=0.1, warmup_epochs=1.0)
lr = [gpu_tta_peer.lr_at(s, args, 468, 1872) for s in (0, 467, 468, 1170, 1871)]
expected = [0.1 / 468, 0.1, 0.1, 0.05, 0.5 * 0.1 * (1 + __import__("math").cos(__import__("math").pi * 1403 / 1404))]
assert all(abs(a - b) < 1e-12 for a, b in zip(lr, expected)), lr
PY
  # scripts/gpu-check.sh's measuring modes, dry: this build, the CPU, the tiny data, LeNet-5.
  if grep -q -- '--precision' <<< "$("$sp" train --help)"; then
    recipe="--model lenet5 --epochs 1 --batch-size 32 --lr 0.05 --warmup-epochs 1 --eval-every 8 --targets 20 --layout channels-last"
    gpu() { PATH="$tmp/bin:$PATH" SP=${GPU_SP-$sp} DEVICE=cpu DATA_DIR=$tmp/idx TTA_RECIPE=$recipe SPEED_SECONDS=0.2 SPEED_WARMUP=2 \
              TTA_CONFIGS="np|--devices cuda:0" SPEED_OURS="l5-1p|l5|--model lenet5 --batch-size 32 --partitions 1 --devices cuda:0" \
              SPEED_PEERS="l5|--model lenet5 --batch-size 32" "$bench/../scripts/gpu-check.sh" "$@"; }
    gpu tta "$tmp/deps" "$tmp/tta" 600 fp32 1 > "$tmp/gpu.log" 2>&1 || fail "gpu-check.sh tta: $(tail -n 20 "$tmp/gpu.log")"
    grep -Eq '^\| 1 \| np \| fp32 \| [0-9]+ \| [0-9.]+ \| ' "$tmp/tta/tta.md" && grep -q '^| 1 | pytorch-eager | fp32 |' "$tmp/tta/tta.md" ||
      fail "gpu-check.sh tta: $(cat "$tmp/tta/tta.md")"
    gpu precision "$tmp/deps" "$tmp/precision" 600 1 > "$tmp/gpu.log" 2>&1 || fail "gpu-check.sh precision: $(tail -n 20 "$tmp/gpu.log")"
    grep -Eq '^\| 1 \| [0-9.]+ \| [0-9.]+ \| [-+][0-9.]+ \| ' "$tmp/precision/precision.md" && ! grep -q warning "$tmp/precision/precision.md" ||
      fail "gpu-check.sh precision: $(cat "$tmp/precision/precision.md")"
    gpu speed "$tmp/deps" "$tmp/speed" 3 bf16 > "$tmp/gpu.log" 2>&1 || fail "gpu-check.sh speed: $(tail -n 20 "$tmp/gpu.log")"
    grep -Eq '^\| l5-1p \| bf16 \| [0-9]+ \| [0-9]+ \(channels-last\) \| [0-9.]+ \| - \| - \| 3 \| off/on/on; off/on/on \|$' "$tmp/speed/speed.md" ||
      fail "gpu-check.sh speed: $(cat "$tmp/speed/speed.md")"
    # Odd rounds run ours first, even rounds PyTorch's.
    [ "$(python3 -c 'import json,sys; print(" ".join(json.loads(l)["who"][:3] for l in open(sys.argv[1])))' "$tmp/speed/speed.jsonl")" = \
      "sta pyt pyt sta sta pyt" ] || fail "gpu-check.sh speed: the sides' order: $(cat "$tmp/speed/speed.jsonl")"
    # PyTorch's settings (TF32 and cuDNN's benchmark mode) are fp32 on a CPU.
    gpu speed "$tmp/deps" "$tmp/speed3" 3 defaults > "$tmp/gpu.log" 2>&1 || fail "gpu-check.sh speed defaults: $(tail -n 20 "$tmp/gpu.log")"
    grep -Eq '^\| l5-1p \| fp32 \| [0-9]+ \| ' "$tmp/speed3/speed.md" || fail "gpu-check.sh speed defaults: $(cat "$tmp/speed3/speed.md")"
    if gpu speed "$tmp/deps" "$tmp/speed2" 2 > "$tmp/gpu.log" 2>&1; then fail "gpu-check.sh speed ran 2 rounds"; fi
    grep -qx 'ROUNDS 2: expected 3 or more (the table gives medians)' "$tmp/gpu.log" || fail "gpu-check.sh speed 2 rounds: $(cat "$tmp/gpu.log")"
    # One call's worth with this build packed as for a GPU machine: the tests (on the CPU), the
    # speed table, time to accuracy; OUT gets the tables and one tarball of the rest.
    "$bench/../scripts/gpu-check.sh" pack "$tmp/packed" "$(dirname "$sp")/../.." > "$tmp/gpu.log" 2>&1 ||
      fail "gpu-check.sh pack: $(tail -n 5 "$tmp/gpu.log")"
    GPU_SP= CHECKS="graphs lock speed tta" LOCK_RUNS=1 SPEED_ROUNDS=3 WORK="$tmp/all-work" \
      gpu all "$tmp/packed" "$tmp/all" 600 > "$tmp/gpu.log" 2>&1 ||
      fail "gpu-check.sh all: $(grep -hE 'rc=[1-9]|skipped|failed|FAIL' "$tmp/gpu.log" "$tmp/all-work"/*.log "$tmp/all-work"/*/steps.log 2>/dev/null | head -n 20
                                grep -h -A6 'Failure$' "$tmp/all-work"/*/steps.log 2>/dev/null | head -n 30; tail -n 30 "$tmp/gpu.log")"
    grep -q '^using the packed build: ' "$tmp/gpu.log" || fail "gpu-check.sh all did not use the packed build: $(cat "$tmp/gpu.log")"
    [ "$(ls "$tmp/all" | tr '\n' ' ')" = "checks.tgz lock.txt speed.md tta.md " ] && grep -q '^graphs: rc=0$' "$tmp/gpu.log" &&
      tar tzf "$tmp/all/checks.tgz" | grep '^./graphs/steps.log$' > /dev/null || fail "gpu-check.sh all: $(ls "$tmp/all"; cat "$tmp/gpu.log")"
    CHECKS="graphs speedy" gpu all "$tmp/deps" "$tmp/all2" 600 > "$tmp/gpu.log" 2>&1 && fail "gpu-check.sh all ran CHECKS=speedy"
    grep -qx 'CHECKS: speedy is not one of graphs, lock, speed, speed-defaults, table5, tta, precision' "$tmp/gpu.log" || fail "gpu-check.sh all speedy: $(cat "$tmp/gpu.log")"
    status=0; gpu all "$tmp/deps" "$tmp/all3" soon > "$tmp/gpu.log" 2>&1 || status=$?
    [ "$status" = 2 ] && grep -qx 'SECONDS soon: expected a whole number' "$tmp/gpu.log" ||
      fail "gpu-check.sh all soon: exit $status, $(cat "$tmp/gpu.log")"
  else
    echo "gpu-check.sh dry runs: skipped (this stalepipe has no --precision)"
  fi
else
  echo "GPU peers: skipped (no PyTorch for $py)"
fi
echo "bench scripts ok"
