#!/usr/bin/env bash
# Every classifier family of torchvision 0.14, at its smallest variant, through
# `stalepipe train --model-file`: scripted by PyTorch with 10 classes, 3x64x64 images from a
# folder of generated photos, batch 8, 6 steps, a register where --balance flops puts it for 2
# partitions. For each family:
#   trains      stale, threads: the cut network trains (finite losses, exit 0)
#   seq = none  the sequential schedule with the register equals no register, bit for bit
#   executors   stale threads = emulated = processes (2 ranks), every tensor of the checkpoints
#   resume      stopped at step 3 (a checkpoint, where every run drains) and resumed equals the
#               run straight through (dropout and drop-path draws included)
#   export      --export loads in PyTorch and computes what the original network computes with
#               the trained weights
# GoogLeNet and Inception v3 must be refused in one line naming their output type (their
# scripted forward returns a tuple). Prints a Markdown table, writes it to --table FILE, and
# exits non-zero when any check fails. Needs python3-torch and python3-torchvision.
#
# Usage: bench/torchvision_zoo.sh [--stalepipe BIN] [--work DIR] [--table FILE] [--families a,b,...]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
stalepipe=$here/../build/apps/stalepipe/stalepipe
work=
table=
families=
python=/usr/bin/python3  # Debian's, which has torch; the first python3 on PATH may not
while (($#)); do
  case $1 in
    --stalepipe) stalepipe=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --table) table=$2; shift 2 ;;
    --families) families=${2//,/ }; shift 2 ;;
    *) echo "torchvision_zoo.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x $stalepipe ]] || { echo "torchvision_zoo.sh: $stalepipe is not an executable; build first or pass --stalepipe" >&2; exit 2; }
"$python" -c "import torchvision" 2>/dev/null || { echo "torchvision_zoo.sh: $python cannot import torchvision (apt install python3-torchvision)" >&2; exit 2; }
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
families=${families:-alexnet vgg11_bn resnet18 resnet50 resnext50_32x4d wide_resnet50_2 squeezenet1_0 squeezenet1_1 densenet121 shufflenet_v2_x0_5 mobilenet_v2 mobilenet_v3_small mnasnet0_5 efficientnet_b0 efficientnet_v2_s regnet_x_400mf convnext_tiny googlenet inception_v3}

"$python" "$here/make_photos.py" "$work/photos" 10 8 80 72 || exit 1
"$python" "$here/torchvision_zoo.py" script "$work/models" $families > "$work/params.txt" || exit 1
zoo_py=("$python" "$here/torchvision_zoo.py")

# run_args NAME OUT: the options every run of a family shares, into `args`.
run_args() {
  args=(--model-file "$work/models/$1.pt" --data "folder:$work/photos" --val-fraction 0.25 --image-size 64
        --batch-size 8 --lr 0.002 --max-steps 6 --checkpoint-every 3 --epochs 1 --threads 2 --progress none
        --out "$2")
}

# train NAME OUT EXTRA...: one run of the family, its output in OUT.log.
train() {
  local name=$1 out=$2
  shift 2
  run_args "$name" "$out"
  "$stalepipe" train "${args[@]}" "$@" > "$out.log" 2>&1
}

# launch_train NAME OUT EXTRA...: the same on 2 ranks of the processes executor, a thread each
# (a flag given twice takes its last value).
launch_train() {
  local name=$1 out=$2
  shift 2
  run_args "$name" "$out"
  "$stalepipe" launch --nproc 2 -- train "${args[@]}" --threads 1 --executor processes "$@" > "$out.log" 2>&1
}

# check LABEL COMMAND...: runs the command; on failure records the label and the last line it printed.
check() {
  local label=$1
  shift
  local output
  if output=$("$@" 2>&1); then return 0; fi
  failed+=("$label: $(tail -n 1 <<< "$output")")
  return 1
}

# last_line RUN: the last line a run printed (its error, when it failed).
last_line() { tail -n 1 "$1.log"; }

family_row() {
  local name=$1 dir=$work/runs/$1 cut="--partitions 2 --balance flops"
  mkdir -p "$dir"
  failed=()
  local start=$SECONDS params
  params=$(awk -v n="$name" '$1 == n { print $2 }' "$work/params.txt")
  if [[ $name == googlenet || $name == inception_v3 ]]; then
    train "$name" "$dir/threads" $cut
    local rc=$? line
    line=$(last_line "$dir/threads")
    if ((rc == 2)) && [[ $(wc -l < "$dir/threads.log") -eq 1 && $line == *"it must return one tensor"* ]]; then
      echo "| $name | $params | refused, as it must be: \`${line#stalepipe: error: $work/models/}\` | - | - | - | - | - | - | $((SECONDS - start)) | |"
      return 0
    fi
    echo "| $name | $params | - | ✘ | - | - | - | - | - | $((SECONDS - start)) | expected a one-line refusal of its tuple output and exit 2; got exit $rc: $line |"
    return 1
  fi
  local trains=✔ seq=✔ executors=✔ resume=✔ export=✔
  train "$name" "$dir/threads" $cut --export "$dir/threads.pt" || { trains=✘; failed+=("trains: $(last_line "$dir/threads")"); }
  local pieces speed
  pieces=$(grep -o 'partition 1: units [^,]*' "$dir/threads.log" | sed 's/partition 1: units //')
  speed=$(sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$dir/threads/summary.json" 2>/dev/null | cut -d. -f1)
  if [[ $trains == ✔ ]]; then
    { train "$name" "$dir/sequential" $cut --schedule sequential --export "$dir/sequential.pt" &&
      train "$name" "$dir/none" --pipeline none --export "$dir/none.pt" &&
      check "seq = none" "${zoo_py[@]}" same "$dir/sequential.pt" "$dir/none.pt"; } ||
      { seq=✘; [[ ${#failed[@]} -gt 0 ]] || failed+=("seq = none: $(last_line "$dir/none")"); }
    local n=${#failed[@]}
    { train "$name" "$dir/emulated" $cut --executor emulated &&
      check "threads = emulated" "${zoo_py[@]}" same "$dir/threads" "$dir/emulated" &&
      launch_train "$name" "$dir/processes" $cut &&
      check "threads = processes" "${zoo_py[@]}" same "$dir/threads" "$dir/processes"; } ||
      { executors=✘; ((${#failed[@]} > n)) || failed+=("executors: $(tail -n 1 "$dir/emulated.log" "$dir/processes.log" 2>/dev/null | tail -n 1)"); }
    n=${#failed[@]}
    { train "$name" "$dir/resumed" $cut --stop-at-step 3 ||
        [[ -f $dir/resumed/checkpoint/manifest.json ]]; } &&
      "$stalepipe" train --resume "$dir/resumed" --progress none > "$dir/resumed.log" 2>&1 &&
      check "resume" "${zoo_py[@]}" same "$dir/threads" "$dir/resumed" ||
      { resume=✘; ((${#failed[@]} > n)) || failed+=("resume: $(last_line "$dir/resumed")"); }
    check "export" "${zoo_py[@]}" reload "$work/models/$name.pt" "$dir/threads.pt" || export=✘
  else
    seq=- executors=- resume=- export=-
  fi
  local note=""
  ((${#failed[@]})) && note=$(IFS=';'; echo "${failed[*]}")
  echo "| $name | $params | ${pieces:-?} | $trains | $seq | $executors | $resume | $export | ${speed:--} | $((SECONDS - start)) | $note |"
  ((${#failed[@]} == 0))
}

header="| network | parameters | partition 1 (--balance flops) | trains | seq = none | threads = emulated = processes | resume | export | img/s | s | failures |
|---|---|---|---|---|---|---|---|---|---|---|"
rows=()
status=0
echo "$header"
for name in $families; do
  row=$(family_row "$name") || status=1
  echo "$row"
  rows+=("$row")
  rm -rf "$work/runs/$name"  # VGG-11's checkpoints alone take gigabytes
done
if [[ -n $table ]]; then
  { echo "$header"; printf '%s\n' "${rows[@]}"; } > "$table"
fi
exit $status
