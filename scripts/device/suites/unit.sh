#!/usr/bin/env bash
# Suite `unit`: the GPU test binaries. The one place they are run (other suites call this
# file for their tests: lib.sh's unit_tests).
#   gpu   $BIN/sparse3d_gpu_tests --gtest_filter=$GTEST_FILTER (default *); when a test
#         crashes, a cuda-gdb backtrace of the last test started.
#   mesh  $BIN/sparse3d_mesh_gpu_tests (else sparse3d_gpu_tests) --gtest_filter=MeshGpu.*
#         (GTEST_FILTER when set); .deps/glb/lib on the library path when carried.
#   full  the tests on the full trellis2-shape-1024 checkpoint (prepare_model.sh, 15 steps):
#         EpilogueFullGpu.* (the gemm_gelu_epilogue check over all 30 MLP layers on real
#         payloads) and NullContextGpu.FullCheckpoint* (the null-context paths bitwise).
# Default: gpu mesh. Logs under $OUT/<mode>; one line per binary, the tests' own report lines
# ("[ name ] ...") and the failures.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

# gtest LOG BINARY FILTER [timeout]: one run of a test binary, and its summary.
gtest() {
  local log=$1 bin=$2 filter=$3 limit=${4:-0}
  timeout "$limit" "$bin" --gtest_filter="$filter" > "$log" 2>&1
  local rc=$?
  track $rc
  echo "$(basename "$bin") --gtest_filter='$filter' exit $rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tr '\n' ' ')"
  grep -E "^\[ [a-z]|^\[  FAILED  \] [A-Za-z]|Failure" "$log" | head -40
}

mode_gpu() {
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
  local log=$OUT/gpu_tests.log
  gtest "$log" $BIN/sparse3d_gpu_tests "${GTEST_FILTER:-*}"
  if grep -q "Segmentation fault\|Aborted" "$log" || ! grep -q "PASSED" "$log"; then
    track 1
    last=$(grep "^\[ RUN" "$log" | tail -n 1 | awk '{print $NF}')
    timeout 120 cuda-gdb -batch -ex run -ex bt --args $BIN/sparse3d_gpu_tests --gtest_filter="$last" \
      > "$OUT/crash_bt.log" 2>&1
    grep -E "^#|signal" "$OUT/crash_bt.log" | head -20
  fi
}

mode_mesh() {
  [ -d .deps/glb/lib ] && export LD_LIBRARY_PATH="$PWD/.deps/glb/lib:$LD_LIBRARY_PATH"
  local bin=$BIN/sparse3d_mesh_gpu_tests
  [ -x "$bin" ] || bin=$BIN/sparse3d_gpu_tests
  gtest "$OUT/gpu_tests.log" "$bin" "${GTEST_FILTER:-MeshGpu.*}"
}

mode_full() {
  source scripts/device/prepare_model.sh
  export SPARSE3D_FULL_CKPT=$W/shape.json SPARSE3D_FULL_MANIFEST=$W/pl/manifest.json SPARSE3D_FULL_STEPS=15
  gtest "$OUT/epilogue_full.log" $BIN/sparse3d_gpu_tests 'EpilogueFullGpu.*' 200
  grep -E "over every|\[ model" "$OUT/epilogue_full.log" | head -12
  gtest "$OUT/null_full15.log" $BIN/sparse3d_gpu_tests 'NullContextGpu.FullCheckpoint*' 260
  grep -E "\[full\] [0-9]+ steps|differ" "$OUT/null_full15.log" | head -8
}

run_modes unit "gpu mesh" -- "$@"
