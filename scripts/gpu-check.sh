#!/usr/bin/env bash
# Builds and checks stalepipe against the PyTorch wheel's CUDA LibTorch on a GPU machine,
# which has the wheel, CMake and ninja but none of our Debian build dependencies and no network.
#
#   scripts/gpu-check.sh pack DEPS [BUILD]          # here (Debian): copy what that machine lacks
#   scripts/gpu-check.sh run DEPS OUT SECONDS [EXPERIMENT.json...]   # there
#   scripts/gpu-check.sh speed DEPS OUT ROUNDS [PRECISION|defaults]   # there: the one-GPU speed table
#   scripts/gpu-check.sh tta DEPS OUT SECONDS PRECISION [SEED...]     # there: time to accuracy against PyTorch
#   scripts/gpu-check.sh precision DEPS OUT SECONDS [SEED...]         # there: bf16 against fp32
#   scripts/gpu-check.sh graphs DEPS OUT                              # there: the CUDA graphs', input's and race probe's tests on cuda:0
#   scripts/gpu-check.sh lock DEPS OUT                                # there: the graphs' lock against its negative control
#   scripts/gpu-check.sh all DEPS OUT SECONDS                         # there: one call's worth of the above, in order of worth
#
# `run` builds in build-gpu, runs `ctest -L unit`, then trains each experiment file with
# `stalepipe sweep` until SECONDS (counted from the script's start) have passed; a sweep stopped
# then leaves its finished runs. OUT receives machine.txt, steps.log and a tarball of each
# experiment's results. `speed`, `tta` and `precision` build the CLI only (no tests) and write
# OUT/<mode>.jsonl (every run), OUT/<mode>.json (rows and figures) and OUT/<mode>.md (the table);
# docs/performance.md ("On a GPU") gives what each prints and how long it takes.
# PRECISION: fp32 (TF32 off), tf32 or bf16, the same on both sides (`stalepipe train` and
# `stalepipe bench --precision`, bench/gpu_peer.py --precision); cuDNN's benchmark mode is left
# off on both, PyTorch eager's default. `speed` also takes `defaults`: the settings PyTorch users
# run, cuDNN TF32 on and cuDNN's benchmark mode on, on both sides (`--precision tf32
# --cudnn-benchmark` for both; PyTorch's own default leaves matmul TF32 off, which here touches
# only ResNet-56's one 64x10 matmul); its rows read "tf32+benchmark", and in a dry run on a CPU
# (no TF32, no cuDNN) it is fp32.
#
# A build tree made here against the same wheel (BUILD, docs/performance.md "On a GPU") saves
# that machine the build: `pack DEPS BUILD` copies its CLI and test programs into DEPS/build,
# and the measuring modes and `graphs` there then use them and build nothing, if the sources
# there are those it was built from (sources_digest; else they build: `run` always does, as
# ctest needs the whole tree).
#
# Knobs for a dry run of the measuring modes on a CPU (their figures mean nothing there):
# SP=path/to/stalepipe uses that binary instead of building; DEVICE=cpu trains on the CPU (ours'
# cuda:0 becomes cpu, the peers get --device cpu); DATA_DIR=DIR reads Fashion-MNIST's four IDX
# files from DIR on both sides (default /usr/share/datasets/fashion-mnist). The configurations
# are variables too (SPEED_OURS, SPEED_PEERS, TTA_RECIPE, TTA_CONFIGS, PRECISION_CONFIG; see each
# mode), and so are the times: SPEED_SECONDS (5: timed seconds of each speed measurement, ours
# and PyTorch's), SPEED_WARMUP (30: untimed steps before each; a PyTorch model kept from an
# earlier round warms up 10), OURS_TIMEOUT (120: the longest one of ours may take), PEER_TIMEOUT
# (300: the longest wait for a PyTorch measurement, a first compile included), SPEED_BUDGET
# (450: no speed round begins that would end later), MIN_RUN_SECONDS (60: no training run of
# tta or precision begins with less of SECONDS left).
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/.."

# The speed rows the GPU targets name, which `all` measures and `speed` among others: ResNet-56
# b128 with one and two partitions on one GPU, each eager and with CUDA graphs, against PyTorch
# eager and torch.compile'd. Channels-last only, ResNet-56's faster layout in PyTorch eager too
# (NCHW ran 5-25% slower at b128 on an H100, results/gpu-speed-h100), so 3 rounds fit one call.
R56_B128="--model resnet56 --batch-size 128 --layout channels-last"
TARGET_OURS="resnet56-b128-1p|resnet56-b128|$R56_B128 --partitions 1 --devices cuda:0
resnet56-b128-2p|resnet56-b128|$R56_B128 --pipeline 25 --devices cuda:0,cuda:0
resnet56-b128-1p-graphs|resnet56-b128|$R56_B128 --partitions 1 --devices cuda:0 --cuda-graphs
resnet56-b128-2p-graphs|resnet56-b128|$R56_B128 --pipeline 25 --devices cuda:0,cuda:0 --cuda-graphs"
TARGET_PEERS="resnet56-b128|$R56_B128
resnet56-b128|$R56_B128 --compile"

pack() {
  local deps=$1 build=${2:-}
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
  # Replaced, not copied into: a second pack would nest them and pass the carry's 64 MiB.
  rm -rf "$deps/googletest" "$deps/fashion-mnist"
  cp -r /usr/src/googletest "$deps/googletest"
  cp -r /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
  if [ -n "$build" ]; then
    rm -rf "$deps/build" && mkdir -p "$deps/build/apps/stalepipe" "$deps/build/tests" &&
      strip -o "$deps/build/apps/stalepipe/stalepipe" "$build/apps/stalepipe/stalepipe" || return 1
    local t
    for t in "$build"/tests/test_*; do
      [ -x "$t" ] && [ -f "$t" ] && { strip -o "$deps/build/tests/$(basename "$t")" "$t" || return 1; }
    done
    sources_digest > "$deps/build/sources.sha256" || return 1
  fi
  du -sh "$deps"
}

# What a packed build was built from: the sources and CMake files, as they are in the tree
# here and in its copy there (which has no .git). Build BUILD from the tree as it is, then pack.
sources_digest() {
  find CMakeLists.txt cmake src include apps tests -type f ! -name '*.md' -print0 2>/dev/null | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

# A build packed by `pack DEPS BUILD` from these sources: its programs find the wheel's
# LibTorch, the CUDA runtime the wheel brings and libjpeg/libpng (DEPS/prefix/lib) by
# LD_LIBRARY_PATH, since its RUNPATH names folders of the machine it was built on.
use_packed_build() {
  [ -x "$DEPS/build/apps/stalepipe/stalepipe" ] || return 1
  if [ "$(cat "$DEPS/build/sources.sha256" 2>/dev/null)" != "$(sources_digest)" ]; then
    echo "the packed build in $DEPS/build is of other sources than these: building instead"
    return 1
  fi
  local libs
  libs=$(python3 -c 'import glob, os, torch; t = os.path.dirname(torch.__file__)
print(":".join([t + "/lib"] + sorted({os.path.dirname(p) for p in glob.glob(os.path.dirname(t) + "/nvidia/**/libcudart.so.*", recursive=True)})))') ||
    return 1
  export LD_LIBRARY_PATH="$libs:$DEPS/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$DEPS/build/apps/stalepipe/stalepipe" --version > /dev/null || return 1
  export BUILD_DIR=$DEPS/build
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
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=ON &&
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

# What every mode there starts with: DEPS and OUT, the headers the build needs, Fashion-MNIST
# where our loader and the peers read it (DATA_DIR), and OUT/machine.txt. DEPS OUT
machine() {
  DEPS=$(realpath "$1"); OUT=$2; DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$OUT"
  # The wheel ships c10d's headers but not Gloo's, which c10d's include.
  export CPATH="$DEPS/prefix/include"
  if [ ! -d "$DATA_DIR" ] && [ -d "$DEPS/fashion-mnist" ]; then
    mkdir -p "$(dirname "$DATA_DIR")" && cp -r "$DEPS/fashion-mnist" "$DATA_DIR"
  fi
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; g++ --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > "$OUT/machine.txt" 2>&1
  cat "$OUT/machine.txt"
}

run() {
  machine "$1" "$2"; local budget=$3; shift 3
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

# What the measuring modes share: OUT, the data set, machine.txt and the CLI in $SP (built here
# unless SP names one), which must know --precision.
prepare() {
  DEVICE=${DEVICE:-cuda}
  machine "$1" "$2"
  if [ -z "${SP:-}" ] && use_packed_build; then
    SP=$BUILD_DIR/apps/stalepipe/stalepipe
    echo "using the packed build: $SP"
  elif [ -z "${SP:-}" ]; then
    step gtest gtest_prefix && step configure configure && step build cmake --build build-gpu -j"$(nproc)" --target stalepipe ||
      return 1
    SP=build-gpu/apps/stalepipe/stalepipe
  fi
  local help
  help=$("$SP" train --help 2>&1)  # whole first: grep -q would end the writer early, a failure under pipefail
  if ! grep -q -- '--precision' <<< "$help"; then
    echo "$SP: train has no --precision; these checks need it (both sides run the same precision)"
    return 1
  fi
}

# A measuring mode counts the runs that failed or did not fit, prints its table from the others
# and then ends non-zero if there were any.
FAILURES=0
failed() { FAILURES=$((FAILURES + 1)); }
all_ran() {
  if ((FAILURES > 0)); then echo "$FAILURES run(s) failed or were skipped (above; OUT/steps.log)"; return 1; fi
}

check_seeds() {
  local seed
  for seed in "$@"; do
    [[ $seed =~ ^[0-9]+$ ]] || { echo "SEED $seed: expected a whole number"; return 2; }
  done
}

check_precision() {
  case "$1" in
    fp32|tf32|bf16) ;;
    defaults) [ "${2:-}" = speed ] || { echo "PRECISION defaults: only speed takes it"; return 2; } ;;
    *) echo "PRECISION $1: expected fp32, tf32 or bf16${2:+ (or defaults)}"; return 2 ;;
  esac
}

# Both sides' flags for PRECISION, and the rows' label (defaults: PyTorch's settings on a GPU;
# fp32 in a dry run, as a CPU has no TF32 or cuDNN).
precision_flags() {
  if [ "$1" != defaults ]; then echo "--precision $1"
  elif [ "$DEVICE" = cpu ]; then echo "--precision fp32"
  else echo "--precision tf32 --cudnn-benchmark"; fi
}

precision_label() {
  if [ "$1" != defaults ]; then echo "$1"
  elif [ "$DEVICE" = cpu ]; then echo fp32
  else echo tf32+benchmark; fi
}

# Our flags for this machine: cuda:0 becomes cpu in a dry run.
on_device() {
  if [ "$DEVICE" = cpu ]; then echo "${*//cuda:0/cpu}"; else echo "$*"; fi
}

# One measurement of ours for the speed table: `stalepipe bench --seconds` trains the
# configuration on a fixed batch on its first device and times whole steps for SPEED_SECONDS
# after SPEED_WARMUP untimed ones, in a process of its own. Appends a JSON line to
# OUT/speed.jsonl: the rate, the switches read at run time, each partition's graphed and eager
# passes, the peak reserved GPU memory. NAME PEER PRECISION FLAGS...
ours_speed() {
  local name=$1 peer=$2 precision=$3; shift 3
  local json=/tmp/speed-$name.json log=/tmp/speed-$name.log
  rm -f "$json"
  # A measurement that hangs (a capture that never ends, say) is stopped, not the whole call.
  # shellcheck disable=SC2046  # the flags are words
  timeout "${OURS_TIMEOUT:-120}" "$SP" bench --seconds "${SPEED_SECONDS:-5}" --warmup-steps "${SPEED_WARMUP:-30}" \
    $(precision_flags "$precision") --json "$json" "$@" > "$log" 2>&1
  local rc=$?
  if ((rc != 0)); then
    echo "$name: failed (exit $rc$( ((rc == 124)) && echo ": stopped after OURS_TIMEOUT s"))"; tail -n 3 "$log"
    cat "$log" >> "$OUT/steps.log"; failed; return 1
  fi
  cat "$log" >> "$OUT/steps.log"
  python3 - "$json" "$name" "$peer" "$(precision_label "$precision")" "$*" >> "$OUT/speed.jsonl" <<'PY'
import json, sys
path, name, peer, precision, flags = sys.argv[1:]
b = json.load(open(path))
print(json.dumps({"who": "stalepipe", "config": name, "peer": peer, "precision": precision, "flags": flags,
                  "config_precision": b["precision"], "layout": "", "images_per_second": round(b["images_per_second"], 1),
                  "timed_steps": b["timed_steps"], "timed_seconds": round(b["timed_seconds"], 2),
                  "warmup_steps": b["warmup_steps"], **b["switches"], "cuda_graphs": b["cuda_graphs"],
                  "partitions": b["partitions"], "peak_reserved_bytes": b["peak_reserved_bytes"]}))
PY
  tail -n 1 "$OUT/speed.jsonl"
}

# PyTorch's side of the speed table: one bench/gpu_peer.py --serve process for the whole call,
# so that each torch.compile'd model compiles once (its first request, outside the rate).
peer_start() {
  local device=()
  [ "$DEVICE" = cpu ] && device=(--device cpu)
  # perf_hints: Inductor says there why it ran a graph without CUDA graphs.
  # shellcheck disable=SC2046  # the flags are words
  coproc PEER { TORCH_LOGS=${TORCH_LOGS:-perf_hints} exec python3 bench/gpu_peer.py --serve $(precision_flags "$1") \
                  "${device[@]}" 2>> "$OUT/peer.log"; }
}

# SECONDS CONFIG FLAGS...: one measurement of SECONDS timed, appended to OUT/speed.jsonl unless
# SECONDS is "warm" (then 1 s, not recorded: a first request, which compiles). A first compile
# may take minutes; a peer that does not answer in time is stopped, and the rest of the call
# has none.
peer_ask() {
  local seconds=$1 config=$2 line; shift 2
  if [ -z "${PEER_PID:-}" ]; then echo "$config $*: no peer (it stopped earlier)"; failed; return 1; fi
  echo "--config $config --seconds ${seconds/warm/1} $*" >&"${PEER[1]}"
  if ! read -r -t "${PEER_TIMEOUT:-300}" line <&"${PEER[0]}"; then
    echo "$config $*: the peer did not answer; stopped (OUT/peer.log):"; tail -n 5 "$OUT/peer.log"
    kill "$PEER_PID" 2> /dev/null; PEER_PID=
    failed; return 1
  fi
  if [[ $line != '{"who"'* ]]; then echo "$config $*: $line"; failed; return 1; fi
  [ "$seconds" = warm ] || echo "$line" >> "$OUT/speed.jsonl"
  echo "$line"
}

peer_stop() {
  if [ -n "${PEER_PID:-}" ]; then
    eval "exec ${PEER[1]}>&-"  # end of requests: the peer exits
    wait "$PEER_PID"
  fi
}

# ROUNDS (3 or more) rounds of ours and PyTorch's, eager and torch.compile'd,
# all on a fixed batch on the device, timed over SPEED_SECONDS of steady state each, at one
# PRECISION; odd rounds run ours first, even rounds PyTorch's. Then the medians, ratios,
# switches and memory (bench/gpu_table.py speed), which also fails a -graphs row whose
# partitions ran no pass as a CUDA graph. SPEED_OURS (NAME|PEER|bench FLAGS a line) and
# SPEED_PEERS (PEER|gpu_peer.py FLAGS a line) replace the configurations below.
speed() {
  local rounds=$3 precision=${4:-fp32}
  [[ $rounds =~ ^[0-9]+$ ]] && ((rounds >= 3)) || { echo "ROUNDS $rounds: expected 3 or more (the table gives medians)"; return 2; }
  check_precision "$precision" speed || return 2
  prepare "$1" "$2" || return 1
  local help
  help=$("$SP" bench --help 2>&1)
  grep -q -- '--seconds' <<< "$help" || { echo "$SP: bench has no --seconds; the speed check needs it"; return 1; }
  local ours_configs=${SPEED_OURS:-"$TARGET_OURS
resnet56-b512-1p|resnet56-b512|--model resnet56 --layout channels-last --batch-size 512 --partitions 1 --devices cuda:0
lenet5-b128-1p|lenet5-b128|--model lenet5 --batch-size 128 --partitions 1 --devices cuda:0"}
  local peer_configs=${SPEED_PEERS:-"$TARGET_PEERS
resnet56-b512|--model resnet56 --batch-size 512 --layout channels-last
lenet5-b128|--model lenet5 --batch-size 128 --layout nchw
lenet5-b128|--model lenet5 --batch-size 128 --layout channels-last
lenet5-b128|--model lenet5 --batch-size 128 --layout nchw --compile"}
  mapfile -t SPEED_OURS_LINES <<< "$ours_configs"
  mapfile -t SPEED_PEER_LINES <<< "$peer_configs"
  peer_start "$precision"
  local r i name flags round_start last_round=0 done_rounds=0
  # The compiles first, so that no round holds one (and SPEED_BUDGET judges rounds alike).
  for ((i = 0; i < ${#SPEED_PEER_LINES[@]}; ++i)); do
    IFS='|' read -r name flags <<< "${SPEED_PEER_LINES[i]}"
    # shellcheck disable=SC2086
    [[ " $flags " == *" --compile "* ]] && echo "compiling $name $flags" && peer_ask warm "$name" $flags
  done
  for ((r = 1; r <= rounds; ++r)); do
    # A round that would end past SPEED_BUDGET seconds (from the script's start) is not begun,
    # so that the table of the rounds run comes back within one call.
    if ((r > 1 && SECONDS + last_round > ${SPEED_BUDGET:-450})); then
      echo "round $r and later: not begun (the last round took $last_round s, $SECONDS s have passed)"; break
    fi
    round_start=$SECONDS
    if ((r % 2)); then
      echo "round $r: stalepipe first"; speed_ours "$precision"; speed_peers
    else
      echo "round $r: PyTorch first"; speed_peers; speed_ours "$precision"
    fi
    last_round=$((SECONDS - round_start)) done_rounds=$r
  done
  peer_stop
  python3 bench/gpu_table.py speed "$OUT/speed.jsonl" --json "$OUT/speed.json" | tee "$OUT/speed.md"
  ((PIPESTATUS[0] == 0)) || failed
  if ((done_rounds < 3)); then echo "only $done_rounds round(s) fit SPEED_BUDGET; the medians need 3"; failed; fi
  all_ran
}

# One round's side: every configuration of ours (SPEED_OURS_LINES) at PRECISION, or every
# one of PyTorch's (SPEED_PEER_LINES).
speed_ours() {
  local line name peer flags
  for line in "${SPEED_OURS_LINES[@]}"; do
    IFS='|' read -r name peer flags <<< "$line"
    # shellcheck disable=SC2046  # the flags are words
    ours_speed "$name" "$peer" "$1" $(on_device "$flags")
  done
}

speed_peers() {
  local line name flags
  for line in "${SPEED_PEER_LINES[@]}"; do
    IFS='|' read -r name flags <<< "$line"
    # shellcheck disable=SC2086
    peer_ask "${SPEED_SECONDS:-5}" "$name" --warmup-steps "${SPEED_WARMUP:-30}" $flags
  done
}

# The time-to-accuracy recipe (experiments/time-to-accuracy-resnet56-gpu.json) in the flags
# both `stalepipe train` and bench/gpu_tta_peer.py take; ours adds what the peer does anyway.
TTA_RECIPE_DEFAULT="--model resnet56 --epochs 4 --batch-size 128 --lr 0.1 --momentum 0.9 --weight-decay 0.0005 \
--warmup-epochs 1 --eval-every 156 --targets 85,90,92 --layout channels-last"
OURS_RECIPE="--drop-last --lr-schedule cosine --executor threads --threads 2 --progress none"

# One run of ours with the recipe, if it fits the budget; appends a JSON line (summary.json's
# time_to_target, the evaluations of metrics.jsonl) to FILE. FILE NAME SEED PRECISION FLAGS...
ours_tta() {
  local file=$1 name=$2 seed=$3 precision=$4; shift 4
  local dir=/tmp/tta-$name-s$seed-$precision left=$((BUDGET - SECONDS))
  if ((left < ${MIN_RUN_SECONDS:-60})); then echo "$name seed $seed $precision: skipped, $left s left"; failed; return 1; fi
  rm -rf "$dir"
  # shellcheck disable=SC2086  # the recipe is words
  if ! step "$name-s$seed-$precision" timeout "$left" "$SP" train ${TTA_RECIPE:-$TTA_RECIPE_DEFAULT} $OURS_RECIPE \
      --data "fashion-mnist:$DATA_DIR" --seed "$seed" --precision "$precision" --out "$dir" "$@"; then
    failed; return 1
  fi
  python3 - "$dir" "$name" "$seed" "$precision" "$*" >> "$file" <<'PY'
import json, sys
run, name, seed, precision, flags = sys.argv[1:]
s = json.load(open(run + "/summary.json"))
evaluations = [{k: j[k] for k in ("step", "epoch", "wall_seconds", "test_accuracy")}
               for j in map(json.loads, open(run + "/metrics.jsonl")) if "test_accuracy" in j]
print(json.dumps({"who": "stalepipe", "config": name, "seed": int(seed), "precision": precision, "flags": flags,
                  "config_precision": json.load(open(run + "/config.json")).get("precision"),
                  "images_per_second": round(s["images_per_second"], 1), "train_seconds": s["wall_seconds"],
                  "test_accuracy": s.get("test_accuracy"), "time_to_target": s["time_to_target"],
                  "evaluations": evaluations}))
PY
}

peer_tta() {
  local file=$1 seed=$2 precision=$3 left=$((BUDGET - SECONDS)) device=()
  if ((left < ${MIN_RUN_SECONDS:-60})); then echo "peer seed $seed: skipped, $left s left"; failed; return 1; fi
  [ "$DEVICE" = cpu ] && device=(--device cpu)
  # shellcheck disable=SC2086
  step "pytorch-eager-s$seed-$precision" timeout "$left" python3 bench/gpu_tta_peer.py ${TTA_RECIPE:-$TTA_RECIPE_DEFAULT} \
    --data "$DATA_DIR" --seed "$seed" --precision "$precision" "${device[@]}" --json "$file" || failed
}

# Time to accuracy (the recipe) of ours, each configuration of TTA_CONFIGS (NAME|FLAGS a
# line), against the PyTorch eager loop, seed by seed, alternating who goes first, as long as
# SECONDS (from the script's start) leave MIN_RUN_SECONDS for the next run.
tta() {
  local deps=$1 out=$2 precision=$4; BUDGET=$3; shift 4
  local seeds=("$@")
  ((${#seeds[@]})) || seeds=(1 2)
  check_precision "$precision" && check_seeds "${seeds[@]}" || return 2
  prepare "$deps" "$out" || return 1
  local configs
  mapfile -t configs <<< "${TTA_CONFIGS:-"nonpipelined|--devices cuda:0
2partitions-one-gpu|--pipeline 25 --devices cuda:0,cuda:0
2partitions-one-gpu-graphs|--pipeline 25 --devices cuda:0,cuda:0 --cuda-graphs"}"
  local seed c name flags
  for seed in "${seeds[@]}"; do
    ((seed % 2 == 0)) && peer_tta "$OUT/tta.jsonl" "$seed" "$precision"
    for c in "${configs[@]}"; do
      IFS='|' read -r name flags <<< "$c"
      # shellcheck disable=SC2046
      ours_tta "$OUT/tta.jsonl" "$name" "$seed" "$precision" $(on_device "$flags")
    done
    ((seed % 2 == 1)) && peer_tta "$OUT/tta.jsonl" "$seed" "$precision"
  done
  python3 bench/gpu_table.py tta "$OUT/tta.jsonl" --json "$OUT/tta.json" | tee "$OUT/tta.md"
  all_ran
}

# The recipe's 4 epochs at fp32 and at bf16 (PRECISION_CONFIG: our flags, non-pipelined on
# cuda:0 by default), seed by seed, then the accuracy difference and the rates.
precision() {
  local deps=$1 out=$2; BUDGET=$3; shift 3
  local seeds=("$@")
  ((${#seeds[@]})) || seeds=(1 2)
  check_seeds "${seeds[@]}" || return 2
  prepare "$deps" "$out" || return 1
  local flags seed p order
  flags=$(on_device "${PRECISION_CONFIG:---devices cuda:0}")
  for seed in "${seeds[@]}"; do
    order=(fp32 bf16)
    ((seed % 2 == 0)) && order=(bf16 fp32)
    for p in "${order[@]}"; do
      # shellcheck disable=SC2086
      ours_tta "$OUT/precision.jsonl" nonpipelined "$seed" "$p" $flags
    done
  done
  python3 bench/gpu_table.py precision "$OUT/precision.jsonl" --json "$OUT/precision.json" | tee "$OUT/precision.md"
  all_ran
}

# The CUDA graphs' tests on cuda:0 with real graphs (tests/unit/exec/graphs_test.cpp: graphed
# training against eager within their tolerance), the input's (pixels normalised on the GPU
# and copied ahead give the host's batches), and the race probe
# (tests/unit/api/stream_order_test.cpp: ResNet-20 on two partitions of cuda:0, 60 steps with
# deterministic cuDNN, threads = emulated bit for bit eagerly, with graphs, in bf16 and with
# two replicas). The graphs' speed is in the `speed` table (the -graphs rows).
graphs() {
  prepare "$1" "$2" || return 1
  local tests=build-gpu/tests
  if [ -n "${BUILD_DIR:-}" ]; then
    tests=$BUILD_DIR/tests
  else
    step build-tests cmake --build build-gpu -j"$(nproc)" --target test_exec test_data test_api || return 1
  fi
  # Backward.*: each partition's backward runs on its own thread, not on LibTorch's one per GPU.
  STALEPIPE_TEST_DEVICE=$(on_device cuda:0) step graphs-test timeout 240 "$tests/test_exec" --gtest_filter='Graphs.*:Backward.*' || failed
  # The input's normalisation on the GPU gives the host's values.
  STALEPIPE_TEST_DEVICE=$(on_device cuda:0) step input-test timeout 60 sh -c \
    "$tests/test_data --gtest_filter='PixelNormalizer.*' && $tests/test_api --gtest_filter='LoaderSource.*'" || failed
  # Three times: it once died of a segmentation fault that the same machine did not repeat
  # (a GPU test that dies prints its stack, tests/support/test_device.h).
  STALEPIPE_TEST_DEVICE=$(on_device cuda:0) step race-probe timeout 240 "$tests/test_api" --gtest_filter='StreamOrder.*' \
    --gtest_repeat=3 || failed
  all_ran
}

# The negative control of the CUDA graphs' lock (tests/unit/exec/graphs_test.cpp, GraphLock.*:
# threads capture a convolution with batch norm, forward and backward, at once, and must give
# what one capture alone gives): LOCK_RUNS (default 50) runs with the lock and as many without
# (STALEPIPE_TEST_GRAPH_LOCK=off), each a process of its own, as a crash ends its process.
# OUT/lock.txt counts per mode the runs bit for bit, crashed or hung, and with other bits or an
# error; a run with the lock that is not bit for bit fails the check. Without the lock, none
# failing leaves the lock unproven, not disproven.
lock() {
  prepare "$1" "$2" || return 1
  local tests=build-gpu/tests runs=${LOCK_RUNS:-50} mode i rc passed crashed other
  if [ -n "${BUILD_DIR:-}" ]; then
    tests=$BUILD_DIR/tests
  else
    step build-tests cmake --build build-gpu -j"$(nproc)" --target test_exec || return 1
  fi
  [[ $runs =~ ^[0-9]+$ ]] && ((runs >= 1)) || { echo "LOCK_RUNS $runs: expected a whole number >= 1"; return 2; }
  for mode in on off; do
    passed=0 crashed=0 other=0
    for ((i = 1; i <= runs; ++i)); do
      STALEPIPE_TEST_DEVICE=$(on_device cuda:0) STALEPIPE_TEST_GRAPH_LOCK=$mode timeout 60 "$tests/test_exec" \
        --gtest_filter='GraphLock.*' >> "$OUT/lock-$mode.log" 2>&1
      rc=$?
      if ((rc == 0)); then passed=$((passed + 1))
      elif ((rc == 124 || rc > 128)); then crashed=$((crashed + 1))
      else other=$((other + 1)); fi
    done
    echo "lock $mode: $runs runs: $passed bit for bit, $crashed crashed or hung, $other other bits or an error" |
      tee -a "$OUT/lock.txt"
  done
  grep -q "^lock on: $runs runs: $runs bit for bit," "$OUT/lock.txt" || failed
  all_ran
}

# One call's worth of checks, in order of their worth, each begun only while SECONDS (from the
# script's start; keep it 15 s under the call's limit, or nothing comes back) leave it room:
# the tests on cuda:0 (graphs), the lock's negative control (lock), the speed table of the
# ResNet-56 b128 rows the targets name at fp32 (speed) and at PyTorch's settings
# (speed-defaults), SPEED_ROUNDS (default 5) alternated rounds each (SPEED_OURS and
# SPEED_PEERS replace the rows), time to accuracy against PyTorch for seeds 1-3 (tta), the
# Table 5 compute model's check (table5: bench/table5_prediction.sh on cuda:0; 15 s on an
# H200); CHECKS (default "graphs lock speed speed-defaults tta table5", and precision) chooses
# and orders them, SEEDS (default "1 2 3") the seeds of tta and precision. One build serves
# all. Each check's console and files go to WORK/<check> (default /tmp/gpu-all); OUT receives
# all of WORK as checks.tgz, each table (lock.txt, speed.md, speed-defaults.md, tta.md,
# precision.md, table5.txt) and nothing else, as the device tool returns few files.
all() {
  local deps=$1 out=$2 budget=$3 work=${WORK:-/tmp/gpu-all} check left need
  local checks=${CHECKS:-graphs lock speed speed-defaults tta table5}
  [[ $budget =~ ^[0-9]+$ ]] || { echo "SECONDS $budget: expected a whole number"; return 2; }
  for check in $checks; do
    case $check in graphs|lock|speed|speed-defaults|table5|tta|precision) ;;
      *) echo "CHECKS: $check is not one of graphs, lock, speed, speed-defaults, table5, tta, precision"; return 2 ;; esac
  done
  rm -rf "$work" && mkdir -p "$work" "$out" || return 1
  prepare "$deps" "$work" || return 1
  export SP DEVICE
  export SPEED_OURS=${SPEED_OURS:-$TARGET_OURS} SPEED_PEERS=${SPEED_PEERS:-$TARGET_PEERS}
  for check in $checks; do
    left=$((budget - SECONDS))
    # The least time in which each gives something: the tests; 3 rounds; 4 profiles; one
    # seed's 4 runs (tta), 2 runs (precision).
    case $check in graphs|lock) need=60 ;; speed*) need=240 ;; table5) need=90 ;; tta) need=180 ;; *) need=100 ;; esac
    if ((left < need)); then echo "== $check: skipped, $left s left (it needs $need)"; failed; continue; fi
    echo "== $check ($left s left)"
    case $check in
      graphs|lock) timeout "$left" "$SELF" "$check" "$deps" "$work/$check" ;;
      speed) SPEED_BUDGET=$((left - 10)) timeout "$left" "$SELF" speed "$deps" "$work/speed" "${SPEED_ROUNDS:-5}" fp32 ;;
      speed-defaults) SPEED_BUDGET=$((left - 10)) timeout "$left" "$SELF" speed "$deps" "$work/speed-defaults" \
                        "${SPEED_ROUNDS:-5}" defaults ;;
      table5) mkdir -p "$work/table5" && DEVICE=$(on_device cuda:0) timeout "$left" bench/table5_prediction.sh "$work/table5" ;;
      # shellcheck disable=SC2086  # the seeds are words
      tta|precision) timeout "$left" "$SELF" "$check" "$deps" "$work/$check" $((left - 5)) \
                       $([ "$check" = tta ] && echo fp32) ${SEEDS:-1 2 3} ;;
    esac > "$work/$check.log" 2>&1
    local rc=$?
    ((rc == 0)) || failed
    echo "$check: rc=$rc"; grep -v '^{"who"' "$work/$check.log" | tail -n 30
  done
  tar czf "$out/checks.tgz" -C "$work" .
  local table
  for table in lock/lock.txt speed/speed.md speed-defaults/speed.md tta/tta.md precision/precision.md table5.log; do
    [ -f "$work/$table" ] || continue
    local name
    case $table in speed-defaults/*) name=speed-defaults.md ;; table5.log) name=table5.txt ;; *) name=$(basename "$table") ;; esac
    cp "$work/$table" "$out/$name"
  done
  all_ran
}

case "${1:-}" in
  pack) pack "$2" "${3:-}" ;;
  run) shift; run "$@" ;;
  speed|tta|precision|graphs|lock|all)
    min_args=4; [ "$1" = graphs ] || [ "$1" = lock ] && min_args=3
    if (($# < min_args)); then echo "usage: $0 $1 DEPS OUT ... (see the comment at the top)" >&2; exit 2; fi
    mode=$1; shift
    "$mode" "$@" ;;
  *) echo "usage: $0 pack DEPS [BUILD] | run DEPS OUT SECONDS [EXPERIMENT.json...] | speed DEPS OUT ROUNDS [PRECISION]" \
       "| tta DEPS OUT SECONDS PRECISION [SEED...] | precision DEPS OUT SECONDS [SEED...] | graphs DEPS OUT | lock DEPS OUT" \
       "| all DEPS OUT SECONDS" >&2; exit 2 ;;
esac
