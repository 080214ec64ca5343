#!/bin/bash
# Pipeline / ceiling before (OLD, built at 1802517) and after (NEW) the fused batch norm, ResNet-20,
# `stalepipe bench --rounds 1` alternated twice; writes ceiling-{old,new}-{1,2}.json here.
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${OLD:?set OLD to a stalepipe built at 1802517}"
NEW=${NEW:-build/apps/stalepipe/stalepipe}
for i in 1 2; do
  for v in old new; do
    bin=$OLD; [ $v = new ] && bin=$NEW
    "$bin" bench --model resnet20 --partitions 2 --rounds 1 --layout channels-last \
      --json results/bench/session14/ceiling-$v-$i.json > /dev/null 2>&1
    python3 - "$v" "$i" <<'PY'
import json, sys
d = json.load(open(f"results/bench/session14/ceiling-{sys.argv[1]}-{sys.argv[2]}.json"))
print(sys.argv[1], sys.argv[2], json.dumps({k: v for k, v in d.items() if isinstance(v, (int, float))})[:600])
PY
  done
done
