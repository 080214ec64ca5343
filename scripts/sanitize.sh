#!/usr/bin/env bash
# Builds stalepipe with gcc's AddressSanitizer and UndefinedBehaviorSanitizer in ./build-asan
# (Debug-like: -O1, frame pointers) and runs `ctest -L unit` and `ctest -L integration` there.
# Slow: a full build (about twice the Release one) plus tests several times slower.
#   scripts/sanitize.sh [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSTALEPIPE_BUILD_BENCH=OFF -DSTALEPIPE_BUILD_EXAMPLES=OFF -DSTALEPIPE_TEST_TIMEOUT=1200 >/dev/null
cmake --build build-asan -j2
# LibTorch is not instrumented and keeps global state to the end: no leak checking.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir build-asan -L unit -j2 --output-on-failure "$@"
ctest --test-dir build-asan -L integration -j2 --output-on-failure "$@"
