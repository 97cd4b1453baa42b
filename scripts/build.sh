#!/usr/bin/env bash
# Configures and builds everything (library, sparse3d, CPU and GPU test executables, the
# Python module when nanobind is installed) into
# build/ (or $BUILD_DIR). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build}
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# ccache, where installed, makes a rebuild of unchanged files (another checkout too) free.
launch=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# The Python module (build/python/sparse3d_engine) wherever nanobind is installed (setup.sh does).
py=()
python3 -c "import nanobind" >/dev/null 2>&1 && py=(-DSPARSE3D_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)")
cmake -S . -B "$BUILD_DIR" "${gen[@]}" "${launch[@]}" "${py[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "${BUILD_JOBS:-$(nproc)}"
