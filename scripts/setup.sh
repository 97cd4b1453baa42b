#!/usr/bin/env bash
# Installs what sparse3d builds with, on a fresh Debian/Ubuntu machine with the CUDA 13
# toolkit: Debian packages (GoogleTest, nlohmann-json, CLI11, CMake, Ninja) and the
# header-only cudnn-frontend from PyPI into .deps/ (git-ignored; carried to the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."

CUDNN_FRONTEND_VERSION=1.32.0
export PATH="/usr/local/cuda/bin:$PATH"

need=()
for pkg in cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libcli11-dev python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

command -v nvcc >/dev/null || { echo "setup: nvcc not found: install the CUDA 13 toolkit" >&2; exit 1; }

if [ ! -f .deps/cudnn_frontend/include/cudnn_frontend.h ]; then
  echo "setup: fetching cudnn-frontend ${CUDNN_FRONTEND_VERSION} headers into .deps/"
  python3 -m pip install -q --no-deps --disable-pip-version-check \
    --target .deps/cudnn_frontend "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}"
fi
