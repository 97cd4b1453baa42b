#!/usr/bin/env bash
# Fallback when a binary built on the development machine does not run on the GPU machine:
# builds there (16 cores), pointing CMake at the cuDNN inside python3's site-packages.
# Needs .deps/cudnn_frontend carried.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDNN_LIBRARY="$CUDNN_SITE/lib/libcudnn.so.9" -DCUDNN_INCLUDE_DIR="$CUDNN_SITE/include" \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build build-dev -j 16
