#!/usr/bin/env bash
# torchvision 0.14's classifier families through --model-file: bench/zoo.sh's checks
# (docs/torchvision.md). Needs python3-torch and python3-torchvision.
#
# Usage: bench/torchvision_zoo.sh [--stalepipe BIN] [--work DIR] [--table FILE] [--families a,b,...] [--cuts flops,middle]
exec "$(dirname "$0")/zoo.sh" --zoo torchvision "$@"
