#!/usr/bin/env bash
# Installs every Debian package stalepipe needs (build, Python package, tests, data, peer scripts).
# Idempotent: safe to run again; installs only what is missing. Run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libopenblas0-openmp      # LibTorch 1.13; OpenBLAS (2x faster than reference BLAS)
  libgloo-dev                           # headers that LibTorch's c10d (distributed) needs
  zlib1g-dev libjpeg-dev libpng-dev   # image folders: JPEG (libjpeg-turbo) and PNG
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist                 # the default data set, /usr/share/datasets/fashion-mnist
  python3-dev python3-torch python3-torchvision python3-pytest  # the Python package and its tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"
