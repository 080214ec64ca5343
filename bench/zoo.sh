#!/usr/bin/env bash
# A zoo's classifier families, each at its smallest variant, through `stalepipe train
# --model-file`: scripted by PyTorch with 10 classes, 3x64x64 images from a folder of generated
# photos, batch 8, 6 steps, a register placed twice: where --balance flops puts it for 2
# partitions (flops) and after the middle one of the layers `stalepipe layers` offers (middle).
# For each family and cut:
#   trains      stale, threads: the cut network trains (finite losses, exit 0)
#   seq = none  the sequential schedule with the register equals no register, bit for bit
#   executors   stale threads = emulated = processes (2 ranks), every tensor of the checkpoints
#   resume      stopped at step 3 (a checkpoint, where every run drains) and resumed equals the
#               run straight through (dropout and drop-path draws included)
#   export      --export loads in PyTorch and computes what the original network computes with
#               the trained weights
# A family the zoo's helper names as refused (a forward that returns a tuple) must be refused in
# one line naming its output type. Prints a Markdown table, writes it to --table FILE (the rows
# of the families run so far, so that a long run resumes with --families after the last), and
# exits non-zero when any check fails.
#
# The zoos: torchvision (bench/torchvision_zoo.sh: torchvision 0.14 from Debian) and timm
# (bench/timm_zoo.sh: timm 0.9.16 in a virtual environment over Debian's torch). Each has a
# helper bench/ZOO_zoo.py: `script OUT FAMILY...` (prints "FAMILY PARAMETERS" a line, or
# "FAMILY refused" for one that must be refused), `families` (the default list).
#
# Usage: bench/zoo.sh --zoo torchvision|timm [--python PY] [--stalepipe BIN] [--work DIR]
#                     [--table FILE] [--families a,b,...] [--cuts flops,middle]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
stalepipe=$here/../build/apps/stalepipe/stalepipe
zoo=
work=
table=
families=
cuts="flops middle"
python=/usr/bin/python3  # Debian's, which has torch; the first python3 on PATH may not
while (($#)); do
  case $1 in
    --zoo) zoo=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --stalepipe) stalepipe=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --table) table=$2; shift 2 ;;
    --families) families=${2//,/ }; shift 2 ;;
    --cuts) cuts=${2//,/ }; shift 2 ;;
    *) echo "zoo.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $zoo == torchvision || $zoo == timm ]] || { echo "zoo.sh: --zoo torchvision or --zoo timm" >&2; exit 2; }
for cut in $cuts; do
  [[ $cut == flops || $cut == middle ]] || { echo "zoo.sh: --cuts: '$cut' is not flops or middle" >&2; exit 2; }
done
[[ -x $stalepipe ]] || { echo "zoo.sh: $stalepipe is not an executable; build first or pass --stalepipe" >&2; exit 2; }
helper=("$python" "$here/${zoo}_zoo.py")
"${helper[@]}" check || exit 2  # says what is missing, in one line
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
families=${families:-$("${helper[@]}" families)} || exit 2

"$python" "$here/make_photos.py" "$work/photos" 10 8 80 72 || exit 1
"${helper[@]}" script "$work/models" $families > "$work/params.txt" || exit 1
zoo_py=("$python" "$here/zoo.py")

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

# The register for CUT of family NAME: --balance flops's, or after the middle of the layers
# `stalepipe layers` offers; into `cut_args`.
cut_args_of() {
  local name=$1 cut=$2
  if [[ $cut == flops ]]; then
    cut_args=(--partitions 2 --balance flops)
    return 0
  fi
  local layer
  layer=$("${zoo_py[@]}" middle "$stalepipe" "$work/models/$name.pt" 2>&1) || { failed+=("middle: $layer"); return 1; }
  cut_args=(--pipeline "$layer")
}

# One row: family NAME with the register at CUT.
family_row() {
  local name=$1 cut=$2 dir=$work/runs/$1-$2
  rm -rf "$dir"  # what a run stopped in the middle left: a run directory refuses a second run
  mkdir -p "$dir"
  failed=()
  local start=$SECONDS params
  params=$(awk -v n="$name" '$1 == n { print $2 }' "$work/params.txt")
  if [[ $params == refused ]]; then
    train "$name" "$dir/threads" --partitions 2
    local rc=$? line
    line=$(last_line "$dir/threads")
    if ((rc == 2)) && [[ $(wc -l < "$dir/threads.log") -eq 1 && $line == *"it must return one tensor"* ]]; then
      echo "| $name | $cut | - | refused, as it must be: \`${line#stalepipe: error: $work/models/}\` | - | - | - | - | - | - | $((SECONDS - start)) | |"
      return 0
    fi
    echo "| $name | $cut | - | - | ✘ | - | - | - | - | - | $((SECONDS - start)) | expected a one-line refusal of its tuple output and exit 2; got exit $rc: $line |"
    return 1
  fi
  local trains=✔ seq=✔ executors=✔ resume=✔ export=✔ cut_args=()
  cut_args_of "$name" "$cut" || trains=✘
  [[ $trains == ✔ ]] && { train "$name" "$dir/threads" "${cut_args[@]}" --export "$dir/threads.pt" ||
                           { trains=✘; failed+=("trains: $(last_line "$dir/threads")"); }; }
  local pieces speed
  pieces=$(grep -o 'partition 1: units [^,]*' "$dir/threads.log" 2>/dev/null | sed 's/partition 1: units //')
  speed=$(sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$dir/threads/summary.json" 2>/dev/null | cut -d. -f1)
  if [[ $trains == ✔ ]]; then
    { train "$name" "$dir/sequential" "${cut_args[@]}" --schedule sequential --export "$dir/sequential.pt" &&
      train "$name" "$dir/none" --pipeline none --export "$dir/none.pt" &&
      check "seq = none" "${zoo_py[@]}" same "$dir/sequential.pt" "$dir/none.pt"; } ||
      { seq=✘; [[ ${#failed[@]} -gt 0 ]] || failed+=("seq = none: $(last_line "$dir/none")"); }
    local n=${#failed[@]}
    { train "$name" "$dir/emulated" "${cut_args[@]}" --executor emulated &&
      check "threads = emulated" "${zoo_py[@]}" same "$dir/threads" "$dir/emulated" &&
      launch_train "$name" "$dir/processes" "${cut_args[@]}" &&
      check "threads = processes" "${zoo_py[@]}" same "$dir/threads" "$dir/processes"; } ||
      { executors=✘; ((${#failed[@]} > n)) || failed+=("executors: $(tail -n 1 "$dir/emulated.log" "$dir/processes.log" 2>/dev/null | tail -n 1)"); }
    n=${#failed[@]}
    { train "$name" "$dir/resumed" "${cut_args[@]}" --stop-at-step 3 ||
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
  echo "| $name | $cut | $params | ${pieces:-?} | $trains | $seq | $executors | $resume | $export | ${speed:--} | $((SECONDS - start)) | $note |"
  ((${#failed[@]} == 0))
}

header="| network | cut | parameters | partition 1 | trains | seq = none | threads = emulated = processes | resume | export | img/s | s | failures |
|---|---|---|---|---|---|---|---|---|---|---|---|"
status=0
echo "$header"
[[ -n $table && ! -s $table ]] && echo "$header" > "$table"
for name in $families; do
  for cut in $cuts; do
    row=$(family_row "$name" "$cut") || status=1
    echo "$row"
    [[ -n $table ]] && echo "$row" >> "$table"  # each row as it comes: a long run resumes
    rm -rf "$work/runs/$name-$cut"  # a large network's checkpoints take gigabytes
    [[ $(awk -v n="$name" '$1 == n { print $2 }' "$work/params.txt") == refused ]] && break  # once is enough
  done
done
exit $status
