#!/usr/bin/env bash
# Soak trials: N kill -9 + resume trials on each of the threads and processes executors.
# Each trial picks a model (lenet5 or resnet20), a PPV, a checkpoint interval and a seed at
# random, trains it uninterrupted on the emulated executor (the reference), then starts the
# same run on the executor under test, kills its whole process group with SIGKILL at a random
# moment within 60% of the reference's duration (again, earlier, if it ended first), and resumes it (or starts it again if no
# checkpoint was written yet) until it ends. A trial holds when the resumed run's metrics.jsonl
# and summary.json equal the reference's (timings aside). Prints each trial and held/total.
#   scripts/soak.sh [N=20] [EXECUTOR...]        (SOAK_SEED picks the random choices)
set -uo pipefail
cd "$(dirname "$0")/.."
n="${1:-20}"
shift || true
executors=("$@")
((${#executors[@]})) || executors=(threads processes)
bin=build/apps/stalepipe/stalepipe
[[ -x $bin ]] || { echo "soak.sh: $bin not built (scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/stalepipe-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
RANDOM=${SOAK_SEED:-1}

# Sets `picked` to one of the arguments (not echoed: a $(subshell) would draw from a reseeded RANDOM).
pick() { local a=("$@"); picked=${a[RANDOM % ${#a[@]}]}; }

# A failed trial's folders and logs, kept for reading.
keep() {
  local kept
  kept=$(mktemp -d /tmp/stalepipe-soak-failed.XXXXXX)
  mv "$1" "$1".*.log "$kept"/ 2>/dev/null
  echo "  kept in $kept"
}

# The same run on the executor under test: plain train, or K ranks through the launcher.
start() {  # executor K args...
  local executor=$1 k=$2; shift 2
  if [[ $executor == processes ]]; then
    setsid "$bin" launch --nproc "$k" --master-port $((20000 + RANDOM % 20000)) -- "$@" --executor processes &
  else
    setsid "$bin" "$@" --executor "$executor" &
  fi
}

# Equal metrics.jsonl (without timings) and summary.json results of two run directories.
same_results() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def lines(d):
    out = []
    for line in open(d + "/metrics.jsonl"):
        j = json.loads(line)
        for k in ("images_per_second", "wall_seconds"):
            j.pop(k, None)
        out.append(j)
    return out
def summary(d):
    s = json.load(open(d + "/summary.json"))
    return {k: s.get(k) for k in ("steps", "test_loss", "test_accuracy", "train_loss")}
a, b = sys.argv[1], sys.argv[2]
sys.exit(0 if lines(a) == lines(b) and summary(a) == summary(b) else 1)
PY
}

trial() {  # executor index
  local executor=$1 dir="$work/$1-$2" model ppv data
  pick lenet5 resnet20; model=$picked
  if [[ $model == lenet5 ]]; then pick 1 2 3 4 1,3 2,4 1,2,3; data=synthetic:1024
  else pick 7 13 19 7,13 7,19; data=synthetic:256; fi
  ppv=$picked
  local commas=${ppv//[^,]/} k
  k=$((${#commas} + 2))
  # lr 0.02: deep LeNet-5 pipelines diverge at the default 0.05 (docs/results.md), and a
  # reference that diverges tests nothing.
  local args=(train --model "$model" --pipeline "$ppv" --data "$data" --test-subset 64 --epochs 2
              --batch-size 32 --lr 0.02 --threads "$k" --threads-per-worker 1 --checkpoint-every $((RANDOM % 4 + 2))
              --seed $((RANDOM % 100 + 1)) --progress none)
  local t0=$SECONDS
  if ! "$bin" "${args[@]}" --executor emulated --out "$dir/ref" >"$dir.ref.log" 2>&1; then
    echo "FAILED: $executor $model PPV $ppv: the reference run failed: $(tail -n 1 "$dir.ref.log")"
    keep "$dir"
    return 1
  fi
  local span=$((SECONDS - t0 + 1)) kill_ms=0 tries=0
  # The executors under test are faster than the reference: a run that ended before its kill
  # is tried again with the kill at half the moment.
  while ((tries == 0)) || [[ -f $dir/run/summary.json ]] && ((tries < 4)); do
    rm -rf "$dir/run"
    kill_ms=$((tries == 0 ? 200 + RANDOM % (span * 600) : kill_ms / 2))
    start "$executor" "$k" "${args[@]}" --out "$dir/run" >"$dir.run.log" 2>&1
    local pid=$!
    sleep "$(printf '%d.%03d' $((kill_ms / 1000)) $((kill_ms % 1000)))"
    kill -9 -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    tries=$((tries + 1))
  done
  local resumes=0 early=""
  [[ -f $dir/run/summary.json ]] && early=" (it ended before the kill)"
  while [[ ! -f $dir/run/summary.json ]] && ((resumes < 5)); do
    if [[ -f $dir/run/checkpoint/manifest.json ]]; then start "$executor" "$k" train --resume "$dir/run" --progress none
    else start "$executor" "$k" "${args[@]}" --out "$dir/run"; fi >>"$dir.run.log" 2>&1
    wait $!
    resumes=$((resumes + 1))
  done
  local what="$executor $model PPV $ppv, killed at ${kill_ms} ms of ~${span} s, $resumes restart(s)$early"
  if [[ -f $dir/run/summary.json ]] && same_results "$dir/ref" "$dir/run"; then
    echo "held: $what"
    rm -rf "$dir" "$dir".*.log
    return 0
  fi
  echo "FAILED: $what"
  keep "$dir"
  return 1
}

status=0
for executor in "${executors[@]}"; do
  held=0
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$work/$executor-$i"
    if trial "$executor" "$i"; then held=$((held + 1)); else status=1; fi
  done
  echo "soak $executor: $held/$n held"
done
exit $status
