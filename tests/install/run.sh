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
cmake -S "$here" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" \
  || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" > "$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/build/consumer"
