#!/usr/bin/env bash
# Suite `build`: the binaries on the device, when no carried ones run there.
#   auto   builds (as force) only when $BIN/sparse3d is missing or does not start here
#          (`sparse3d --version`); otherwise says which binaries it found.
#   force  builds there (16 cores) into build-dev/, pointing CMake at the cuDNN inside
#          python3's site-packages; needs .deps/cudnn_frontend carried. env.sh then takes
#          build-dev/bin as BIN when build/bin holds no sparse3d (and BIN is not set).
# Default: auto.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

mode_force() {
  ( set -e
    cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCUDNN_LIBRARY="$CUDNN_SITE/lib/libcudnn.so.9" -DCUDNN_INCLUDE_DIR="$CUDNN_SITE/include" \
      -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
    cmake --build build-dev -j 16 ) > "$OUT/build.log" 2>&1
  track $?
  echo "build-dev: exit $?; $(ls build-dev/bin 2>/dev/null | tr '\n' ' ')"
  [ "$FAILED" = 0 ] || tail -n 30 "$OUT/build.log"
}

mode_auto() {
  if "$BIN/sparse3d" --version > "$OUT/version.txt" 2>&1; then
    echo "carried binaries run: $BIN ($(head -1 "$OUT/version.txt")); $(ls "$BIN" | tr '\n' ' ')"
  else
    echo "no carried sparse3d runs in $BIN ($(tail -1 "$OUT/version.txt")): building"
    mode_force
  fi
}

run_modes build auto -- "$@"
