#!/usr/bin/env bash
# Installs the stalepipe build in $1 into a temporary prefix, then configures, builds and runs
# the separate project in this folder against it with find_package(stalepipe).
# Prints the consumer's "consumer ok: ..." line; exits non-zero on any failure.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stalepipe-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -f "$tmp/prefix/include/stalepipe/stalepipe.h"
# The consumer links the LibTorch the library was built against, as a user must: a build
# against the PyTorch wheel's CUDA LibTorch would otherwise meet Debian's CPU one here.
torch=()
for var in Torch_DIR Caffe2_DIR c10_LIBRARY TORCH_LIBRARY; do
  value=$(sed -n "s/^$var:[A-Z]*=//p" "$build/CMakeCache.txt")
  if [ -n "$value" ]; then torch+=("-D$var=$value"); fi
done
cmake -S "$here" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/prefix" "${torch[@]}" > "$tmp/configure.log" \
  || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/build/consumer"
