#!/usr/bin/env bash
# Builds the fuzz harnesses (fuzz/) with clang-14 and libFuzzer, ASan and UBSan in ./build-fuzz
# (CMake option STALEPIPE_FUZZ) and runs each for SECONDS (default 30), starting from its
# committed corpus fuzz/corpus/<harness>/. Prints executions and corpus size per harness; a
# crash, an ASan/UBSan report or an escaped non-stalepipe exception leaves its input in
# build-fuzz/artifacts/ and makes the script exit 1. Needs clang-14 and libclang-rt-14-dev
# (apt-get install -y clang-14 libclang-rt-14-dev); CI does not run it.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]
#   FUZZ_JOBS=2 scripts/fuzz.sh 600     # two harnesses at a time (one core each)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
for tool in clang-14 clang++-14; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found; apt-get install -y clang-14 libclang-rt-14-dev" >&2; exit 2; }
done
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $sanitizers" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" \
  -DSTALEPIPE_FUZZ=ON -DSTALEPIPE_BUILD_TESTS=OFF -DSTALEPIPE_BUILD_BENCH=OFF -DSTALEPIPE_BUILD_EXAMPLES=OFF >/dev/null
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  for dir in fuzz/corpus/*/; do harnesses+=("$(basename "$dir")"); done
fi
cmake --build build-fuzz -j2 --target "${harnesses[@]/#/fuzz_}"

# LibTorch is not instrumented and keeps global state to the end: no leak checking.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p build-fuzz/artifacts
# One harness for SECONDS; its exit status goes to build-fuzz/<h>.status.
fuzz_one() {
  local h=$1 status=0
  mkdir -p "build-fuzz/corpus/$h"
  "build-fuzz/fuzz/fuzz_$h" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 \
    -artifact_prefix="build-fuzz/artifacts/$h-" "build-fuzz/corpus/$h" "fuzz/corpus/$h" \
    >"build-fuzz/$h.log" 2>&1 || status=$?
  echo "$status" >"build-fuzz/$h.status"
}
# FUZZ_JOBS harnesses at a time (default 1); each is one process on one core.
jobs_at_once="${FUZZ_JOBS:-1}"
[[ $jobs_at_once =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_JOBS=$jobs_at_once: expected a positive integer" >&2; exit 2; }
for h in "${harnesses[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_at_once)); do wait -n || true; done
  fuzz_one "$h" &
done
wait

failed=()
printf "%-22s %12s %10s %8s\n" harness executions corpus result
for h in "${harnesses[@]}"; do
  log="build-fuzz/$h.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: UNITS/BYTES ..."
  corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2 | cut -d/ -f1)
  result=ok
  if [[ $(cat "build-fuzz/$h.status") != 0 ]]; then result="FAILED ($log)"; failed+=("$h"); fi
  printf "%-22s %12s %10s %8s\n" "$h" "${execs:-?}" "$corpus" "$result"
done
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in ${failed[*]}; inputs in build-fuzz/artifacts/" >&2
  exit 1
fi
