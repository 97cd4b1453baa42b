#!/usr/bin/env bash
# Installs what sparse3d builds with, on a fresh Debian/Ubuntu machine with the CUDA 13
# toolkit: Debian packages (GoogleTest, nlohmann-json, CLI11, CMake, Ninja, ccache; for the GLB
# export meshoptimizer, libwebp, libpng and Eigen), nanobind, pytest and NumPy from PyPI (the Python
# module and its tests), the header-only cudnn-frontend from PyPI into .deps/ (git-ignored;
# carried to the GPU machine), and xatlas's C++ source from its PyPI source distribution into
# .deps/xatlas (Debian does not package it; docs/EXPORT.md says why xatlas).
set -euo pipefail
cd "$(dirname "$0")/.."

CUDNN_FRONTEND_VERSION=1.32.0
XATLAS_SDIST_VERSION=0.0.11
export PATH="/usr/local/cuda/bin:$PATH"

# What is missing, judged by the files and commands themselves (a machine may have them
# from elsewhere than Debian's packages, e.g. a GPU image with no package registry).
need=()
have_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/local/include/$1" ]; }
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
# ccache: the wheel (scripts/build_wheel.sh) reuses the C++ build's objects through it.
command -v ccache >/dev/null || need+=(ccache)
have_header gtest/gtest.h || need+=(libgtest-dev)
have_header nlohmann/json.hpp || need+=(nlohmann-json3-dev)
have_header CLI/CLI.hpp || need+=(libcli11-dev)
have_header meshoptimizer.h || need+=(libmeshoptimizer-dev)
have_header webp/encode.h || need+=(libwebp-dev)
have_header png.h || need+=(libpng-dev)
# Eigen: the sparse solve of the atlas's conformal charts (header-only).
have_header eigen3/Eigen/SparseCholesky || need+=(libeigen3-dev)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

command -v nvcc >/dev/null || { echo "setup: nvcc not found: install the CUDA 13 toolkit" >&2; exit 1; }

# The Python module (nanobind) and its tests (pytest, NumPy), from PyPI into this python3.
if ! python3 -c "import nanobind, pytest, numpy" >/dev/null 2>&1; then
  echo "setup: installing nanobind, pytest and numpy for $(python3 --version)"
  python3 -m pip install -q --disable-pip-version-check "nanobind>=2.4" pytest numpy
fi

if [ ! -f .deps/cudnn_frontend/include/cudnn_frontend.h ]; then
  echo "setup: fetching cudnn-frontend ${CUDNN_FRONTEND_VERSION} headers into .deps/"
  python3 -m pip install -q --no-deps --disable-pip-version-check \
    --target .deps/cudnn_frontend "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}"
fi

# xatlas (UV charts and packing for the GLB export): the C++ source of the xatlas Python
# binding's source distribution on PyPI, unpacked into .deps/xatlas; CMake compiles
# xatlas.cpp into a static library of its own. Nothing of it is committed.
if [ ! -f .deps/xatlas/xatlas.cpp ]; then
  echo "setup: fetching xatlas ${XATLAS_SDIST_VERSION} (C++ source, PyPI sdist) into .deps/xatlas"
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check \
    -d "$tmp" "xatlas==${XATLAS_SDIST_VERSION}"
  tar -xzf "$tmp"/xatlas-*.tar.gz -C "$tmp"
  mkdir -p .deps/xatlas
  cp "$tmp"/xatlas-*/extern/xatlas/source/xatlas/xatlas.cpp \
     "$tmp"/xatlas-*/extern/xatlas/source/xatlas/xatlas.h \
     "$tmp"/xatlas-*/extern/xatlas/LICENSE .deps/xatlas/
  rm -rf "$tmp"
fi
