# Sourced by the device scripts: library paths on the H200 machine (cuDNN lives only in
# python3's site-packages there) and the output folder.
export PATH="/usr/local/cuda/bin:$PATH"
CUDNN_SITE=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || true)
[ -n "$CUDNN_SITE" ] || CUDNN_SITE=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
export LD_LIBRARY_PATH="$CUDNN_SITE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Carried binaries in build/bin; else those the build suite made on the device (build-dev).
[ -z "${BIN:-}" ] && [ ! -x build/bin/sparse3d ] && [ -x build-dev/bin/sparse3d ] && BIN=build-dev/bin
BIN=${BIN:-build/bin}
# The GLB export's libraries (meshoptimizer, libwebp, libpng), which the GPU image lacks:
# Debian's packages unpacked into .deps/devsys by scripts/device/make_devsys.sh, carried; on
# the build and library paths here, for building the module and running carried binaries.
if [ -d .deps/devsys/usr ]; then
  DEVSYS=$PWD/.deps/devsys
  export CMAKE_PREFIX_PATH="$DEVSYS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$DEVSYS/usr/lib/x86_64-linux-gnu/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$DEVSYS"
  export LD_LIBRARY_PATH="$DEVSYS/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
fi

# The Python module built here from this tree into build-py/ (kept while the machine stays
# warm), log in $OUT/build_module.log; sets PYTHONPATH to it. Returns cmake's exit status.
build_module() {
  { cmake -S . -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPARSE3D_BUILD_PYTHON=ON \
      -DSPARSE3D_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DPython_EXECUTABLE="$(command -v python3)" \
      -DCUDNN_LIBRARY="$CUDNN_SITE/lib/libcudnn.so.9" -DCUDNN_INCLUDE_DIR="$CUDNN_SITE/include" &&
    cmake --build build-py --target sparse3d_native -j 16; } > "$OUT/build_module.log" 2>&1
  local rc=$?
  export PYTHONPATH="$PWD/build-py/python${PYTHONPATH:+:$PYTHONPATH}"
  return $rc
}
