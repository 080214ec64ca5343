#!/usr/bin/env bash
# Opt-in: installs what bench/peers.py needs (Debian's python3-torch, PyTorch 1.13, the same
# release as libtorch-dev). Not part of scripts/setup.sh, so CI does not pay for it. Run as root.
set -euo pipefail
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq python3-torch
fi
/usr/bin/python3 -c "import torch; print('setup-peers: PyTorch', torch.__version__)"
