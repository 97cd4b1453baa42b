#!/usr/bin/env bash
# Builds the io-layer libFuzzer targets (fuzz/*.cpp) with clang++
# -fsanitize=fuzzer,address,undefined and runs each for a bounded time over the committed
# corrupt-file corpus tests/data/corrupt (docs/RELIABILITY.md: a fuzzer per parser, run in CI).
#
# libFuzzer's runtime comes from the Debian package libclang-rt-<clang major>-dev
# (libclang-rt-14-dev on Debian 12: /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/
# libclang_rt.fuzzer-x86_64.a). The script installs it with apt-get when a trivial
# -fsanitize=fuzzer link fails.
#
# Usage: scripts/fuzz.sh [target ...]     (default: all of fuzz_safetensors fuzz_config
#                                          fuzz_manifest)
# Env:   FUZZ_SECONDS  seconds per target (default 30)
#        FUZZ_BUILD    build folder (default build-fuzz; new corpus entries and crash
#                      artifacts go there, never into tests/data/corrupt)
#        CUDA_HOME     CUDA toolkit (default /usr/local/cuda): core/tensor.cpp and friends
#                      include cuda_runtime.h and link libcudart, though the CPU paths the
#                      fuzzers reach never call it.
# Exit status: non-zero if any target fails to build or finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${FUZZ_SECONDS:-30}
BUILD=${FUZZ_BUILD:-build-fuzz}
CUDA=${CUDA_HOME:-/usr/local/cuda}
CXX=clang++
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_safetensors fuzz_config fuzz_manifest)
mkdir -p "$BUILD/obj"

have_libfuzzer() {
  local t="$BUILD/libfuzzer_probe"
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    > "$t.cpp"
  "$CXX" -fsanitize=fuzzer "$t.cpp" -o "$t" >/dev/null 2>&1
}

if ! have_libfuzzer; then
  major=$("$CXX" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  pkg="libclang-rt-${major}-dev"
  echo "libFuzzer runtime missing: installing $pkg"
  sudo=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo=sudo
  $sudo apt-get update
  $sudo apt-get install -y "$pkg"
  have_libfuzzer || { echo "still no libFuzzer after installing $pkg" >&2; exit 1; }
fi

# The library sources the parsers need, compiled once with coverage instrumentation: the
# two bottom layers whole (core and io, CMakeLists.txt's sparse3d_core and sparse3d_io), so
# that a new file there needs no edit here, and the two parsers above them (the model config
# and the payload manifest), which use only core and io. include/: core's headers include
# the public sparse3d/types.h.
SOURCES=(src/core/*.cpp src/io/*.cpp src/model/config.cpp src/payload/payload.cpp)
CXXFLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all
          -Isrc -Iinclude "-I$CUDA/include")
OBJS=()
for src in "${SOURCES[@]}"; do
  obj="$BUILD/obj/$(echo "${src%.cpp}" | tr / _).o"  # src/io/json.cpp: src_io_json.o
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src/core src/io include/sparse3d src/model/config.h src/payload/payload.h -newer "$obj" -name '*.h' 2>/dev/null | head -1)" ]; then
    echo "compile $src"
    "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$src" -o "$obj"
  fi
  OBJS+=("$obj")
done

# The targets write each input to a file under $TMPDIR (the readers take paths): tmpfs makes
# that a memory copy instead of a disk write, about 50 times faster here.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm

status=0
for target in "${TARGETS[@]}"; do
  echo "== $target: build"
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer,address,undefined "fuzz/$target.cpp" "${OBJS[@]}" \
    "-L$CUDA/lib64" -lcudart "-Wl,-rpath,$CUDA/lib64" -o "$BUILD/$target"
  mkdir -p "$BUILD/corpus/$target" "$BUILD/artifacts"
  echo "== $target: ${SECONDS_EACH}s over tests/data/corrupt"
  # The first corpus folder receives new inputs; the committed seeds are only read.
  if "$BUILD/$target" "$BUILD/corpus/$target" tests/data/corrupt \
       -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$target-" \
       > "$BUILD/$target.log" 2>&1; then
    echo "== $target: no findings ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/$target.log" | grep -o '[0-9]*$') runs)"
  else
    status=1
    echo "== $target: FINDING (log $BUILD/$target.log, input in $BUILD/artifacts/)" >&2
    tail -40 "$BUILD/$target.log" >&2
  fi
done
exit $status
