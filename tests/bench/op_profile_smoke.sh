#!/usr/bin/env bash
# bench/op_profile traces LeNet-5's one-thread step and bench/self_times.py reads the trace.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$("$1" lenet5 "$tmp/ours.json")
grep -q 'images/s over 10 steps (timing every operator)' <<< "$out" || { echo "FAIL: op_profile: $out" >&2; exit 1; }
times=$(python3 "$(dirname "$0")/../../bench/self_times.py" "$tmp/ours.json")
grep -q 'convolution' <<< "$times" || { echo "FAIL: self_times.py found no convolution: $times" >&2; exit 1; }
echo "op_profile ok"
