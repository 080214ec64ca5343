#!/usr/bin/env bash
# Opt-in: installs what the peer scripts under bench/ need (Debian's python3-torch, PyTorch 1.13,
# the same release as libtorch-dev; python3-torchvision 0.14 and python3-pil for the image loader's peer). Not part of scripts/setup.sh, so CI does not pay for it. Run as root.
set -euo pipefail
if ! /usr/bin/python3 -c "import torch, torchvision, PIL" 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq python3-torch python3-torchvision python3-pil
fi
/usr/bin/python3 -c "import torch; print('setup-peers: PyTorch', torch.__version__)"
