#!/usr/bin/env bash
# Builds and checks stalepipe against the PyTorch wheel's CUDA LibTorch on a lent GPU machine,
# which has the wheel, CMake and ninja but none of our Debian build dependencies and no network.
#
#   scripts/gpu-check.sh pack DEPS                  # here (Debian): copy what that machine lacks
#   scripts/gpu-check.sh run DEPS OUT SECONDS [EXPERIMENT.json...]   # there
#   scripts/gpu-check.sh speed DEPS OUT ROUNDS      # there: the one-GPU speed table
#
# `run` builds in build-gpu, runs `ctest -L unit`, then trains each experiment file with
# `stalepipe sweep` until SECONDS (counted from the script's start) have passed; a sweep stopped
# then leaves its finished runs. OUT receives machine.txt, steps.log and a tarball of each
# experiment's results.
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
  local deps=$1
  mkdir -p "$deps/prefix/include" "$deps/prefix/share/cmake"
  cp -r /usr/include/gloo /usr/include/CLI /usr/include/nlohmann /usr/include/zlib.h \
    /usr/include/zconf.h "$deps/prefix/include/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$deps/prefix/share/cmake/"
  # libjpeg-turbo and libpng: headers and the shared libraries (a -dev package's, which that
  # machine lacks); the binaries find them through the build tree's RPATH.
  cp /usr/include/jpeglib.h /usr/include/jmorecfg.h /usr/include/jerror.h /usr/include/x86_64-linux-gnu/jconfig.h \
    /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h "$deps/prefix/include/"
  mkdir -p "$deps/prefix/lib"
  cp -a /usr/lib/x86_64-linux-gnu/libjpeg.so* /usr/lib/x86_64-linux-gnu/libpng16.so* "$deps/prefix/lib/"
  cp -r /usr/src/googletest "$deps/googletest"
  cp -r /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
  du -sh "$deps"
}

# Runs "$@" with its output appended to OUT/steps.log (the device tool returns few files); the
# step's status and last lines go to stdout.
step() {
  local name=$1; shift
  local t0=$SECONDS log=/tmp/gpu-check-step.log
  "$@" > "$log" 2>&1
  local rc=$?
  { echo "=== $name: rc=$rc in $((SECONDS - t0)) s"; cat "$log"; } >> "$OUT/steps.log"
  echo "$name: rc=$rc in $((SECONDS - t0)) s"
  tail -n 5 "$log"
  return $rc
}

gtest_prefix() {
  if [ -d /usr/include/gtest ]; then return; fi
  cmake -S "$DEPS/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF &&
    cmake --build /tmp/gtest-build -j"$(nproc)" && cmake --install /tmp/gtest-build
}

configure() {
  local torch_prefix zlib=() images=()
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  if [ ! -f /usr/include/zlib.h ]; then
    zlib=(-DZLIB_INCLUDE_DIR="$DEPS/prefix/include"
          -DZLIB_LIBRARY="$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')")
  fi
  if [ ! -f /usr/include/jpeglib.h ] || [ ! -f /usr/include/png.h ]; then
    images=(-DJPEG_INCLUDE_DIR="$DEPS/prefix/include" -DJPEG_LIBRARY="$DEPS/prefix/lib/libjpeg.so"
            -DPNG_PNG_INCLUDE_DIR="$DEPS/prefix/include" -DPNG_LIBRARY="$DEPS/prefix/lib/libpng16.so")
  fi
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$DEPS/prefix;/tmp/gtest" "${zlib[@]}" "${images[@]}" \
    -DSTALEPIPE_BUILD_BENCH=OFF -DSTALEPIPE_BUILD_EXAMPLES=OFF
}

run() {
  DEPS=$(realpath "$1"); OUT=$2; local budget=$3; shift 3
  mkdir -p "$OUT"
  # The wheel ships c10d's headers but not Gloo's, which c10d's include.
  export CPATH="$DEPS/prefix/include"
  if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p /usr/share/datasets && cp -r "$DEPS/fashion-mnist" /usr/share/datasets/
  fi
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; g++ --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
  step gtest gtest_prefix && step configure configure && step build cmake --build build-gpu -j"$(nproc)" ||
    return 1
  # 16 processes of 16 OpenMP threads each slowed the data tests 15x there; 2 threads each do not.
  OMP_NUM_THREADS=2 step unit ctest --test-dir build-gpu -L unit -j8 --timeout 120
  local experiment name
  for experiment in "$@"; do
    name=$(basename "$experiment" .json)
    local results seeds seed
    # The results folder (the file's "out", relative to the file) and the seeds.
    read -r results seeds < <(python3 -c 'import json,os,sys; e=sys.argv[1]; j=json.load(open(e))
print(os.path.normpath(os.path.join(os.path.dirname(e), j["out"])), *j.get("seeds", [1]))' "$experiment")
    # Seed by seed, so that a sweep stopped by the budget leaves whole seeds of every run.
    # SIGTERM stops a sweep at a checkpoint, keeping every finished run.
    for seed in $seeds; do
      step "$name-s$seed" timeout "$((budget - SECONDS))" build-gpu/apps/stalepipe/stalepipe sweep "$experiment" --seed "$seed"
    done
    step "$name-collect" build-gpu/apps/stalepipe/stalepipe sweep "$experiment" --collect
    tar czf "$OUT/$name.tar.gz" --exclude=checkpoint "$results"
  done
}

# One training run on the GPU: its steady rate is the images/s of its last epoch (the first
# holds cuDNN's autotuning and the allocator's growth). Appends a JSON line to OUT/speed.jsonl.
ours() {
  local name=$1; shift
  local dir=/tmp/speed-$name
  rm -rf "$dir"
  if ! build-gpu/apps/stalepipe/stalepipe train --progress none --drop-last --out "$dir" "$@" > "$dir.log" 2>&1; then
    echo "$name: failed"; tail -n 3 "$dir.log"; return 1
  fi
  python3 - "$dir/metrics.jsonl" "$name" "$*" >> "$OUT/speed.jsonl" <<'PY'
import json, sys
epochs = [j for j in map(json.loads, open(sys.argv[1])) if j.get("type") == "epoch"]
print(json.dumps({"who": "stalepipe", "config": sys.argv[2], "flags": sys.argv[3],
                  "images_per_second": round(epochs[-1]["images_per_second"], 1),
                  "test_accuracy": epochs[-1].get("test_accuracy")}))
PY
  tail -n 1 "$OUT/speed.jsonl"
}

peer() {
  local name=$1; shift
  python3 bench/gpu_peer.py "$@" --json /tmp/peer.jsonl > /dev/null || return 1
  python3 -c 'import json,sys; j=json.loads(open("/tmp/peer.jsonl").readlines()[-1]); j["config"]=sys.argv[1]; print(json.dumps(j))' \
    "$name" >> "$OUT/speed.jsonl"
  tail -n 1 "$OUT/speed.jsonl"
}

# ROUNDS alternated rounds of ours (real Fashion-MNIST through the loader) and PyTorch eager's
# (a fixed batch on the device), then the medians (bench/gpu_table.py).
speed() {
  DEPS=$(realpath "$1"); OUT=$2; local rounds=$3
  mkdir -p "$OUT"
  export CPATH="$DEPS/prefix/include"
  if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p /usr/share/datasets && cp -r "$DEPS/fashion-mnist" /usr/share/datasets/
  fi
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
  step gtest gtest_prefix && step configure configure && step build cmake --build build-gpu -j"$(nproc)" --target stalepipe ||
    return 1
  # 200 mini-batches an epoch (the second one timed) keep a round near a minute.
  local r56=(--model resnet56 --layout channels-last --epochs 2 --train-subset 25600)
  local eager=(--seconds 5)
  for ((r = 1; r <= rounds; ++r)); do
    ours resnet56-b128-1p "${r56[@]}" --batch-size 128 --devices cuda:0
    peer resnet56-b128 --model resnet56 --batch-size 128 --layout channels-last "${eager[@]}"
    ours resnet56-b128-2p "${r56[@]}" --batch-size 128 --pipeline 25 --devices cuda:0,cuda:0
    peer resnet56-b128 --model resnet56 --batch-size 128 --layout nchw "${eager[@]}"
    ours resnet56-b512-1p "${r56[@]}" --batch-size 512 --devices cuda:0
    peer resnet56-b512 --model resnet56 --batch-size 512 --layout channels-last "${eager[@]}"
    ours lenet5-b128-1p --model lenet5 --devices cuda:0 --epochs 2 --batch-size 128
    peer lenet5-b128 --model lenet5 --batch-size 128 --layout nchw "${eager[@]}"
  done
  python3 bench/gpu_table.py "$OUT/speed.jsonl" | tee "$OUT/speed.md"
}

#   scripts/gpu-check.sh graphs DEPS OUT    # there
# --cuda-graphs on a GPU: the graphed-against-eager tests with real CUDA graphs on cuda:0, then
# ResNet-56 b128 on 1 and 2 partitions of cuda:0 without and with graphs (OUT/speed.jsonl).
# About 90 s of build and 4-5 minutes of runs.
graphs() {
  DEPS=$(realpath "$1"); OUT=$2
  mkdir -p "$OUT"
  export CPATH="$DEPS/prefix/include"
  if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p /usr/share/datasets && cp -r "$DEPS/fashion-mnist" /usr/share/datasets/
  fi
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
  step gtest gtest_prefix && step configure configure &&
    step build cmake --build build-gpu -j"$(nproc)" --target stalepipe test_exec || return 1
  STALEPIPE_TEST_DEVICE=cuda:0 step graphs-test timeout 180 build-gpu/tests/test_exec --gtest_filter='Graphs.*'
  local r56=(--model resnet56 --layout channels-last --epochs 2 --train-subset 25600 --batch-size 128)
  ours resnet56-b128-1p "${r56[@]}" --devices cuda:0
  ours resnet56-b128-1p-graphs "${r56[@]}" --devices cuda:0 --cuda-graphs
  ours resnet56-b128-2p "${r56[@]}" --pipeline 25 --devices cuda:0,cuda:0
  ours resnet56-b128-2p-graphs "${r56[@]}" --pipeline 25 --devices cuda:0,cuda:0 --cuda-graphs
}

case "${1:-}" in
  pack) pack "$2" ;;
  run) shift; run "$@" ;;
  speed) shift; speed "$@" ;;
  graphs) shift; graphs "$@" ;;
  *) echo "usage: $0 pack DEPS | run DEPS OUT SECONDS [EXPERIMENT.json...] | speed DEPS OUT ROUNDS" >&2; exit 2 ;;
esac
