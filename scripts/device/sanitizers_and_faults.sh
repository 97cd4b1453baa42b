#!/usr/bin/env bash
# Device call: the GPU fault-injection sweeps and the GPU suite under compute-sanitizer's four
# tools (docs/RELIABILITY.md). Carry build/bin/sparse3d and build/bin/sparse3d_gpu_tests.
#
# PARTS (default all four; the whole takes longer than one 10-minute call, so run it as
# PARTS="faults graphs demo" and PARTS=nocache):
#   faults  FaultsGpu.*: every device allocation and every plan build of a cold request
#           failed in turn (alone on the GPU, under `timeout $FAULT_LIMIT`).
#   nocache memcheck (--leak-check full), initcheck and synccheck over the GPU suite but the
#           tests that need CUDA graphs, with the caching allocator off (SPARSE3D_NO_CACHING=1:
#           every allocation's true bounds seen); racecheck over the suites that call no
#           cuBLASLt (racecheck makes cuBLASLt's Hopper kernels raise a hardware exception even
#           when they are filtered out: LinearGpu, a test of cuBLASLt alone, fails under it);
#           every kernel with shared memory or __syncthreads is in those suites.
#   graphs  memcheck, initcheck and synccheck over CudaGraphsGpu, EngineGpu, AllocatorPoolGpu
#           with the caching allocator on (graph capture needs it).
#   demo    initcheck without SPARSE3D_CLEAR_LIBRARY_OUTPUTS on one whole forward: what the
#           hook is for (reports on the buffers cuBLASLt and cuDNN wrote).
# Every run: --error-exitcode 1 and the kernel filter FILTER (default kns=s3d: only the
# engine's own kernels, all in namespace s3d, are instrumented; the libraries' are left out
# by name); initcheck with SPARSE3D_CLEAR_LIBRARY_OUTPUTS=1 (it does not see the library
# kernels' stores, src/core/cuda_util.h). The tools run at once; each sanitizer process is
# under `timeout $LIMIT`.
# Writes to $OUT: fingerprint.txt, faults.log, <tool>.log (kernels named in reports, failed
# tests, head and tail of the reports), summary.txt (printed last).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
PARTS=${PARTS:-faults nocache graphs demo}
FILTER=${FILTER:-kns=s3d}
LIMIT=${LIMIT:-400}
FAULT_LIMIT=${FAULT_LIMIT:-300}
T=$BIN/sparse3d_gpu_tests
GRAPH_TESTS='CudaGraphsGpu.*:EngineGpu.*:AllocatorPoolGpu.*'
RACECHECK_TESTS='SdpaGpu.*:KernelsGpu.*:FusedOps.*:AllocatorPoolGpu.*:-FusedOps.GemmGeluEpilogueMeetsItsTolerance'
{
  $BIN/sparse3d info 2>&1 | head -20
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  compute-sanitizer --version | tail -2
  echo "filter: --kernel-name $FILTER; parts: $PARTS"
} > "$OUT/fingerprint.txt" 2>&1
summary=()
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }

if has faults; then
  timeout "$FAULT_LIMIT" "$T" --gtest_filter='FaultsGpu.*' > "$OUT/faults.log" 2>&1
  summary+=("faults rc $?: $(grep -E "faults: |per cold request" "$OUT/faults.log" | tr '\n' ';')")
  summary+=("faults tests: $(grep -E "^\[ +(OK|FAILED) +\] [A-Z]" "$OUT/faults.log" | tr '\n' ';')")
fi

# One sanitizer process: tool, environment, gtest filter; appends to /tmp/<tool>.full.log.
sanitize() {
  local tool=$1 envs=$2 filter=$3
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  echo "#### $tool [$envs] --gtest_filter=$filter" >> "/tmp/$tool.full.log"
  timeout "$LIMIT" env $envs compute-sanitizer --tool "$tool" --error-exitcode 1 --kernel-name "$FILTER" \
    "${extra[@]}" "$T" --gtest_filter="$filter" >> "/tmp/$tool.full.log" 2>&1
  echo "#### rc $?" >> "/tmp/$tool.full.log"
}
run_tool() {
  local tool=$1 hook=""
  [ "$tool" = initcheck ] && hook="SPARSE3D_CLEAR_LIBRARY_OUTPUTS=1"
  if has nocache; then
    if [ "$tool" = racecheck ]; then sanitize racecheck "SPARSE3D_NO_CACHING=1" "$RACECHECK_TESTS"
    else sanitize "$tool" "SPARSE3D_NO_CACHING=1 $hook" "-FaultsGpu.*:$GRAPH_TESTS"; fi
  fi
  if has graphs && [ "$tool" != racecheck ]; then sanitize "$tool" "$hook" "$GRAPH_TESTS"; fi
  if has demo && [ "$tool" = initcheck ]; then
    sanitize initcheck "SPARSE3D_NO_CACHING=1" "ModelGpu.ForwardMatchesTheCpuBackend"
  fi
}

TOOLS=""
has nocache && TOOLS="memcheck racecheck initcheck synccheck"
has graphs && [ -z "$TOOLS" ] && TOOLS="memcheck initcheck synccheck"
has demo && [ -z "$TOOLS" ] && TOOLS="initcheck"
declare -A pid start
for tool in $TOOLS; do
  rm -f "/tmp/$tool.full.log"
  run_tool "$tool" &
  pid[$tool]=$!; start[$tool]=$(date +%s)
done
for tool in $TOOLS; do
  wait "${pid[$tool]}"
  secs=$(( $(date +%s) - ${start[$tool]} ))
  log="/tmp/$tool.full.log"
  grep -q "^#### rc 124" "$log" && state="TIMED OUT" || state="done"
  # Per process: its error summary, tests passed, exit code.
  runs=$(awk '/^#### [a-z]+ \[/{f=$0; sub(/^#### [a-z]+ /,"",f)} /ERROR SUMMARY|RACECHECK SUMMARY/{e=$0} /PASSED  \] [0-9]+ test/{p=$4}
              /^#### rc/{gsub(/.*SUMMARY: /,"",e); printf "%s: %s, %s passed, rc %s | ", f, e, p, $3; e=""; p="0"}' "$log")
  summary+=("$tool ($state, ${secs}s): $runs")
  { echo "== kernels in reports:"; grep -oE "in (void )?[_A-Za-z0-9:]+[<(]" "$log" | sort | uniq -c | sort -rn | head -20
    echo "== failed tests:"; grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | sort -u
    echo "== head:"; head -c 120000 "$log"; echo; echo "== tail:"; tail -c 30000 "$log"; } > "$OUT/$tool.log"
done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
