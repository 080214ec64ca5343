#!/usr/bin/env bash
# Builds stalepipe with sanitizers and runs `ctest -L unit` and `ctest -L integration` under them.
#   scripts/sanitize.sh [ctest arguments...]         gcc's AddressSanitizer and UndefinedBehavior-
#                                                    Sanitizer, in ./build-asan
#   scripts/sanitize.sh thread [ctest arguments...]  clang's ThreadSanitizer, in ./build-tsan
# Debug-like builds (-O1, frame pointers). Slow: a full build (about twice the Release one) plus
# tests several times slower (TSan: 5-15x). SANITIZE_JOBS (default 2) sets the build's and
# ctest's parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=address
jobs=${SANITIZE_JOBS:-2}
if [[ "${1:-}" == thread ]]; then
  mode=thread
  shift
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=None -DSTALEPIPE_BUILD_BENCH=OFF -DSTALEPIPE_BUILD_EXAMPLES=OFF
        -DSTALEPIPE_TEST_TIMEOUT=2400)

if [[ $mode == address ]]; then
  flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
  cmake -S . -B build-asan "${common[@]}" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan -j"$jobs"
  # LibTorch is not instrumented and keeps global state to the end: no leak checking.
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  ctest --test-dir build-asan -L unit -j"$jobs" --output-on-failure "$@"
  ctest --test-dir build-asan -L integration -j"$jobs" --output-on-failure "$@"
  exit 0
fi

# ThreadSanitizer. LibTorch, c10 and libgomp are not instrumented: the memcpy/memset calls of
# their parallel kernels look like races to TSan, so scripts/tsan.supp suppresses what is
# called from those libraries, and only that.
compiler=${TSAN_CXX:-clang++-14}
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread"
cmake -S . -B build-tsan "${common[@]}" -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan -j"$jobs"
cmake --build build-tsan -j"$jobs" --target tsan_canary
export TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp second_deadlock_stack=1 history_size=4"
# The canary races on purpose in our own code: a run that does not report it would also miss
# ours (suppressions too wide, or no instrumentation), so the script fails if TSan stays silent.
if canary=$(build-tsan/tests/tsan_canary 2>&1); then
  echo "sanitize.sh: the TSan canary ran without a report; is build-tsan instrumented?" >&2
  exit 1
fi
if ! grep -q "WARNING: ThreadSanitizer: data race" <<<"$canary" || ! grep -q "race_on_purpose" <<<"$canary"; then
  echo "sanitize.sh: the TSan canary failed without reporting its race:" >&2
  echo "$canary" >&2
  exit 1
fi
echo "sanitize.sh: TSan reported the canary's race, as it must"
ctest --test-dir build-tsan -L unit -j"$jobs" --output-on-failure "$@"
ctest --test-dir build-tsan -L integration -j"$jobs" --output-on-failure "$@"
