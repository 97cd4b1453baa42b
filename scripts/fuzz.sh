#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*.cpp) with clang++ -fsanitize=fuzzer,address,undefined
# and runs them (docs/RELIABILITY.md: a fuzzer per parser, run in CI):
#   fuzz_safetensors, fuzz_config, fuzz_manifest  the three parsers, seeded with the committed
#                                                 corrupt-file corpus (tests/data/corrupt);
#   fuzz_asset   the payload asset reader against a manifest the input chooses;
#   fuzz_glb_input  the GLB input reader (docs/FORMATS.md), the export's checks of its input
#   fuzz_cli     the command line (the same CLI11 app as main.cpp; commands never run).
# Each target first reads, once, the generated large inputs at the real size limits
# (fuzz/make_seeds.py: 64 MiB manifests, 100,000,000-byte headers, 2^20 values, deep
# nesting): each must finish within -timeout. Then it fuzzes, with a dictionary
# (fuzz/json.dict, fuzz/cli.dict), from the committed and generated small seeds.
#
# libFuzzer's runtime comes from the Debian package libclang-rt-<clang major>-dev
# (libclang-rt-14-dev on Debian 12: /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/
# libclang_rt.fuzzer-x86_64.a). The script installs it with apt-get when a trivial
# -fsanitize=fuzzer link fails.
#
# Usage: scripts/fuzz.sh [--long] [target ...]   (default: all five)
#   CI mode (default): FUZZ_SECONDS per target, inputs up to 16 KiB.
#   --long: FUZZ_RUNS executions per target (default 10,000,000) over FUZZ_JOBS parallel
#           jobs (default: the machine's cores), inputs up to 64 KiB; the corpus is kept in
#           $FUZZ_BUILD/corpus/<target> between runs. Outside CI: hours on a laptop.
# Env:   FUZZ_SECONDS  seconds per target in CI mode (default 30); in --long mode, a cap
#        FUZZ_RUNS, FUZZ_JOBS  --long mode's executions per target and parallel jobs
#        FUZZ_PREBUILT=1  run the targets already built in FUZZ_BUILD (no compiler needed)
#        FUZZ_BUILD    build folder (default build-fuzz; corpus, seeds, logs and crash
#                      artifacts go there, never into tests/data/corrupt)
#        CUDA_HOME     CUDA toolkit (default /usr/local/cuda): core/tensor.cpp and friends
#                      include cuda_runtime.h and link libcudart, though the CPU paths the
#                      fuzzers reach never call it.
# Prints, per target, the large inputs' outcome and the executions with no finding; the
# last line is the total. Exit status: non-zero if any target fails to build or finds a
# crash.
set -euo pipefail
cd "$(dirname "$0")/.."

LONG=""
if [ "${1:-}" = "--long" ]; then LONG=1; shift; fi
SECONDS_EACH=${FUZZ_SECONDS:-30}
BUILD=${FUZZ_BUILD:-build-fuzz}
CUDA=${CUDA_HOME:-/usr/local/cuda}
CXX=clang++
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_safetensors fuzz_config fuzz_manifest fuzz_asset fuzz_glb_input
                                     fuzz_cli)
RUNS=${FUZZ_RUNS:-10000000}
JOBS=${FUZZ_JOBS:-$(nproc)}
mkdir -p "$BUILD/obj"

have_libfuzzer() {
  local t="$BUILD/libfuzzer_probe"
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    > "$t.cpp"
  "$CXX" -fsanitize=fuzzer "$t.cpp" -o "$t" >/dev/null 2>&1
}

if [ -z "${FUZZ_PREBUILT:-}" ] && ! have_libfuzzer; then
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
# that a new file there needs no edit here, and the two parsers above them: the model config
# with the family registry it checks a config against (model/family.cpp and every family's
# folder), and the payload manifest. The families' position tables call the kernels layer,
# linked from the CMake build ($BUILD_DIR, default build) uninstrumented. include/: core's
# headers include the public sparse3d/types.h.
SOURCES=(src/core/*.cpp src/io/*.cpp src/model/config.cpp src/model/family.cpp
         src/model/*/*_family.cpp src/payload/payload.cpp)
KERNELS_LIB="${BUILD_DIR:-build}/libsparse3d_kernels.a"
# fuzz_cli: the command registrations (src/apps but main.cpp), instrumented, linked with the
# engine's static libraries from the CMake build ($BUILD_DIR, default build: scripts/build.sh
# first); the commands themselves never run.
APP_SOURCES=(src/apps/commands.cpp src/apps/cmd_bench.cpp src/apps/cmd_info.cpp
             src/apps/cmd_make.cpp src/apps/cmd_run.cpp src/apps/cmd_export.cpp
             src/apps/engine_flags.cpp
             src/apps/inputs_file.cpp src/apps/sampler_flags.cpp)
CXXFLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all
          -Isrc -Iinclude "-I$CUDA/include")
compile() {  # compile SRC: the object's path on stdout, rebuilt when a source or header is newer
  local src=$1 obj="$BUILD/obj/$(echo "${1%.cpp}" | tr / _).o"  # src/io/json.cpp: src_io_json.o
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src include -newer "$obj" -name '*.h' 2>/dev/null | head -1)" ]; then
    echo "compile $src" >&2
    "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$src" -o "$obj"
  fi
  echo "$obj"
}
OBJS=()
if [ -z "${FUZZ_PREBUILT:-}" ]; then
  for src in "${SOURCES[@]}"; do OBJS+=("$(compile "$src")"); done
fi

# The targets write each input to a file under $TMPDIR (the readers take paths): tmpfs makes
# that a memory copy instead of a disk write, about 50 times faster here.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm

# Generated seeds (small valid inputs; large inputs at the size limits), made once.
SEEDS="$BUILD/seeds"
if [ ! -f "$SEEDS/.done" ] || [ fuzz/make_seeds.py -nt "$SEEDS/.done" ]; then
  rm -rf "$SEEDS"
  python3 fuzz/make_seeds.py "$SEEDS"
  touch "$SEEDS/.done"
fi

status=0
total_runs=0
for target in "${TARGETS[@]}"; do
  extra=()
  if [ -n "${FUZZ_PREBUILT:-}" ]; then  # run the binaries already in $BUILD (a machine without clang)
    [ -x "$BUILD/$target" ] || { echo "== $target: no prebuilt $BUILD/$target" >&2; status=1; continue; }
  else
  echo "== $target: build"
  if [ "$target" = fuzz_cli ]; then
    libs=""
    for l in engine mesh bench payload sampler model ops parallel contract gemm attention kernels io core; do
      [ -f "${BUILD_DIR:-build}/libsparse3d_$l.a" ] && libs="$libs ${BUILD_DIR:-build}/libsparse3d_$l.a"
    done
    if [ ! -f "${BUILD_DIR:-build}/libsparse3d_engine.a" ]; then
      echo "== fuzz_cli: skipped: no engine libraries in ${BUILD_DIR:-build} (run scripts/build.sh)" >&2
      status=1
      continue
    fi
    for src in "${APP_SOURCES[@]}"; do extra+=("$(compile "$src")"); done
    extra+=(-Wl,--start-group $libs -Wl,--end-group "-L$CUDA/lib" -lcublasLt -lcudnn -lnvrtc
            -lmeshoptimizer -lpng -lwebp -lgomp "-Wl,-rpath,$CUDA/lib")
  elif [ "$target" = fuzz_glb_input ]; then
    # The GLB input reader (src/mesh/glb_files.cpp) and the input checks (export.cpp)
    # instrumented; the rest of the mesh layer from the CMake build.
    MESH_LIB="${BUILD_DIR:-build}/libsparse3d_mesh.a"
    [ -f "$MESH_LIB" ] || { echo "== $target: skipped: no $MESH_LIB (run scripts/build.sh)" >&2; status=1; continue; }
    extra+=("$(compile src/mesh/glb_files.cpp)" "$(compile src/mesh/export.cpp)" "${OBJS[@]}"
            "$MESH_LIB" "$KERNELS_LIB" -lmeshoptimizer -lpng -lwebp -lgomp)
  else
    [ -f "$KERNELS_LIB" ] || { echo "== $target: skipped: no $KERNELS_LIB (run scripts/build.sh)" >&2; status=1; continue; }
    extra+=("${OBJS[@]}" "$KERNELS_LIB" -lgomp)
  fi
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer,address,undefined "fuzz/$target.cpp" \
    "${extra[@]}" "-L$CUDA/lib64" -lcudart "-Wl,-rpath,$CUDA/lib64" -o "$BUILD/$target"
  fi
  dict=fuzz/json.dict
  [ "$target" = fuzz_cli ] && dict=fuzz/cli.dict
  seeds=()
  case "$target" in fuzz_safetensors|fuzz_config|fuzz_manifest) seeds+=(tests/data/corrupt);; esac
  [ -d "$SEEDS/$target/small" ] && seeds+=("$SEEDS/$target/small")
  mkdir -p "$BUILD/corpus/$target" "$BUILD/artifacts" "$BUILD/logs/$target"
  common=(-dict="$(realpath "$dict")" -print_final_stats=1 -artifact_prefix="$(realpath "$BUILD")/artifacts/$target-")

  # 1. The large inputs, each read once (libFuzzer runs the files it is given and exits).
  if [ -d "$SEEDS/$target/large" ]; then
    if "$BUILD/$target" -timeout=30 -rss_limit_mb=4096 "$SEEDS/$target/large"/* \
         > "$BUILD/logs/$target/large.log" 2>&1; then
      echo "== $target: $(ls "$SEEDS/$target/large" | wc -l) large inputs read, slowest $(grep -oE 'Executed .* in [0-9]+ ms' "$BUILD/logs/$target/large.log" | sort -t' ' -k4 -n | tail -1 | grep -oE '[0-9]+ ms$')"
    else
      status=1
      echo "== $target: FINDING on a large input (log $BUILD/logs/$target/large.log)" >&2
      tail -30 "$BUILD/logs/$target/large.log" >&2
    fi
  fi

  # 2. Fuzzing. The first corpus folder receives new inputs; the seeds are only read.
  if [ -n "$LONG" ]; then
    per_job=$(( (RUNS + JOBS - 1) / JOBS ))
    echo "== $target: $JOBS jobs x $per_job runs"
    rm -f "$BUILD/logs/$target"/fuzz-*.log
    abs=("$(realpath "$BUILD/corpus/$target")")
    for s in "${seeds[@]}"; do abs+=("$(realpath "$s")"); done
    bin=$(realpath "$BUILD/$target")
    # -jobs writes each job's output to fuzz-<job>.log in the working folder.
    if (cd "$BUILD/logs/$target" && "$bin" "${abs[@]}" "${common[@]}" -jobs="$JOBS" \
          -workers="$JOBS" -runs="$per_job" -max_len=65536 ${FUZZ_SECONDS:+-max_total_time=$FUZZ_SECONDS} \
          -timeout=10 -rss_limit_mb=2048 > jobs.log 2>&1); then failed=""; else failed=1; fi
    runs=$(cat "$BUILD/logs/$target"/fuzz-*.log | grep -oE 'stat::number_of_executed_units: *[0-9]+' | grep -oE '[0-9]+$' | awk '{n += $1} END {print n + 0}' || true)
    crashed=$(grep -lE "ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error|deadly signal" "$BUILD/logs/$target"/fuzz-*.log || true)
  else
    log="$BUILD/logs/$target/ci.log"
    if "$BUILD/$target" "$BUILD/corpus/$target" "${seeds[@]}" "${common[@]}" \
         -max_total_time="$SECONDS_EACH" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
         > "$log" 2>&1; then failed=""; crashed=""; else failed=1; crashed=$log; fi
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | head -1 || true)
  fi
  runs=${runs:-0}
  total_runs=$((total_runs + runs))
  if [ -n "$failed" ] && [ -z "$crashed" ]; then
    status=1
    echo "== $target: FAILED to run (logs in $BUILD/logs/$target)" >&2
    tail -5 "$BUILD/logs/$target"/*.log >&2
  elif [ -z "$crashed" ]; then
    echo "== $target: no findings in $runs runs (corpus $(ls "$BUILD/corpus/$target" | wc -l) inputs)"
  else
    status=1
    echo "== $target: FINDING after $runs runs (logs: $crashed; inputs in $BUILD/artifacts/)" >&2
    for f in $crashed; do grep -m1 -B2 -A30 -E "ERROR:|runtime error|deadly signal" "$f" >&2 || tail -40 "$f" >&2; done
  fi
done
echo "fuzz: ${#TARGETS[@]} targets, $total_runs runs, $([ $status = 0 ] && echo "no findings" || echo "FINDINGS")"
exit $status
