#!/usr/bin/env bash
# timm 0.9.16's model families through --model-file: bench/zoo.sh's checks (docs/timm.md).
# timm runs on Debian's torch 1.13 from a virtual environment (no download at run time beyond
# this one-time install):
#   /usr/bin/python3 -m venv --system-site-packages ~/.venvs/timm
#   ~/.venvs/timm/bin/pip install --no-deps timm==0.9.16 && ~/.venvs/timm/bin/pip install pyyaml huggingface_hub safetensors
# The whole zoo runs for hours on 2 cores: run it in parts with --families (the families in
# `timm_zoo.py families`) and --table FILE, which keeps each row as it comes.
#
# Usage: bench/timm_zoo.sh [--python ~/.venvs/timm/bin/python] [--stalepipe BIN] [--work DIR]
#                          [--table FILE] [--families a,b,...] [--cuts flops,middle]
python=${TIMM_PYTHON:-$HOME/.venvs/timm/bin/python}
exec "$(dirname "$0")/zoo.sh" --zoo timm --python "$python" "$@"
