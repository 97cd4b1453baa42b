#!/usr/bin/env bash
# Suite `sanitizers`: the GPU tests under compute-sanitizer (docs/RELIABILITY.md). The one
# place compute-sanitizer is run (sanitize, below). Carry $BIN/sparse3d_gpu_tests.
#
# The four tools (one run: the modes named run at once, each tool a process of its own):
#   nocache  memcheck (--leak-check full), initcheck and synccheck over the GPU suite but the
#            tests that need CUDA graphs, with the caching allocator off (SPARSE3D_NO_CACHING=1:
#            every allocation's true bounds seen); racecheck over the suites that call no
#            cuBLASLt (racecheck makes cuBLASLt's Hopper kernels raise a hardware exception even
#            when they are filtered out: LinearGpu, a test of cuBLASLt alone, fails under it);
#            every kernel with shared memory or __syncthreads is in those suites.
#   graphs   memcheck, initcheck and synccheck over CudaGraphsGpu, EngineGpu, EngineApiOnDevice,
#            AllocatorPoolGpu with the caching allocator on (graph capture needs it).
#   demo     initcheck without SPARSE3D_CLEAR_LIBRARY_OUTPUTS on one whole forward: what the
#            hook is for (reports on the buffers cuBLASLt and cuDNN wrote).
#   Every run: --error-exitcode 1 and the kernel filter FILTER (default kns=s3d: only the
#   engine's own kernels, all in namespace s3d, are instrumented; the libraries' are left out
#   by name); initcheck with SPARSE3D_CLEAR_LIBRARY_OUTPUTS=1 (it does not see the library
#   kernels' stores, src/core/cuda_util.h). Each sanitizer process is under `timeout $LIMIT`
#   (400). nocache alone fills a 10-minute call: run it apart from graphs,demo.
#   Writes to $OUT/tools: fingerprint.txt, <tool>.log (kernels named in reports, failed
#   tests, head and tail of the reports), summary.txt.
#
# Quick memcheck runs (caching allocator off), each a gtest filter:
#   memcheck        *Small*:ModelGpu.*:ModelOnDevice.*:SdpaGpu.SelfAttention*:SdpaGpu.Rows*:
#                   LinearGpu.OddSizes* (--leak-check full, 300 s)
#   memcheck-small  *Small* (--leak-check full, no time limit)
#   memcheck-fused  the fused kernels' tests (--leak-check full, 100 s)
#   memcheck-dense  DenseLayout.*:DenseSampler.*:DenseGpu.Forward* (--kernel-name kns=s3d, 300 s)
#   memcheck-fast   *FastNorm*:*PlanSearch* (the tolerance kernels and searched plans;
#                   --leak-check full, 400 s)
# Default: memcheck.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh
FILTER=${FILTER:-kns=s3d}
LIMIT=${LIMIT:-400}
T=$BIN/sparse3d_gpu_tests

# sanitize LOG LIMIT "ENV=..." TOOL GTEST_FILTER [compute-sanitizer options...]: one
# compute-sanitizer process over the GPU tests, appended to LOG; returns its exit status.
sanitize() {
  local log=$1 limit=$2 envs=$3 tool=$4 filter=$5
  shift 5
  echo "#### $tool [$envs] --gtest_filter=$filter" >> "$log"
  timeout "$limit" env $envs compute-sanitizer --tool "$tool" --error-exitcode 1 "$@" \
    "$T" --gtest_filter="$filter" >> "$log" 2>&1
  local rc=$?
  echo "#### rc $rc" >> "$log"
  return $rc
}

# quick NAME LIMIT GTEST_FILTER [options...]: one memcheck run with the caching allocator off.
quick() {
  local log=$OUT/memcheck.log name=$1 limit=$2 filter=$3
  shift 3
  rm -f "$log"
  sanitize "$log" "$limit" SPARSE3D_NO_CACHING=1 memcheck "$filter" "$@"
  track $?
  echo "$name exit $?: $(grep -E 'ERROR SUMMARY' "$log" | tail -n 1); $(grep -c 'Invalid' "$log") invalid accesses; $(grep -E '^\[  PASSED  \]' "$log")"
}
mode_memcheck() {
  quick memcheck 300 "*Small*:ModelGpu.*:ModelOnDevice.*:SdpaGpu.SelfAttention*:SdpaGpu.Rows*:LinearGpu.OddSizes*" --leak-check full
}
mode_memcheck_small() { quick "memcheck (small GPU tests)" 0 '*Small*' --leak-check full; }
mode_memcheck_fused() {
  quick "memcheck fused" 100 "FusedOps.QkRmsNorm*:FusedOps.Cross*:FusedOps.Modulated*:FusedOps.GatedResidual*:FusedOps.MlpGelu*:FusedModel.*:FusedModelGpu.*" --leak-check full
}
mode_memcheck_dense() {
  quick "memcheck DenseGpu" 300 "DenseLayout.*:DenseSampler.*:DenseGpu.Forward*" --kernel-name kns=s3d
}
mode_memcheck_fast() { quick "memcheck fast kernels and plans" 400 "*FastNorm*:*PlanSearch*" --leak-check full; }

# The four tools over the parts in PARTS (nocache, graphs, demo), all tools at once.
mode_tools() {
  GRAPH_TESTS='CudaGraphsGpu.*:EngineGpu.*:EngineApiOnDevice.*:AllocatorPoolGpu.*'
  RACECHECK_TESTS='SdpaGpu.*:KernelsGpu.*:FusedOps.*:AllocatorPoolGpu.*:-FusedOps.GemmGeluEpilogueMeetsItsTolerance'
  {
    $BIN/sparse3d info 2>&1 | head -20
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    compute-sanitizer --version | tail -2
    echo "filter: --kernel-name $FILTER; parts: $PARTS"
  } > "$OUT/fingerprint.txt" 2>&1
  summary=()
  has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
  tool_run() {  # one tool over the parts
    local tool=$1 hook="" extra=()
    [ "$tool" = initcheck ] && hook="SPARSE3D_CLEAR_LIBRARY_OUTPUTS=1"
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    local log=/tmp/$tool.full.log
    if has nocache; then
      if [ "$tool" = racecheck ]; then sanitize "$log" "$LIMIT" "SPARSE3D_NO_CACHING=1" racecheck "$RACECHECK_TESTS" --kernel-name "$FILTER"
      else sanitize "$log" "$LIMIT" "SPARSE3D_NO_CACHING=1 $hook" "$tool" "-FaultsGpu.*:$GRAPH_TESTS" --kernel-name "$FILTER" "${extra[@]}"; fi
    fi
    if has graphs && [ "$tool" != racecheck ]; then
      sanitize "$log" "$LIMIT" "$hook" "$tool" "$GRAPH_TESTS" --kernel-name "$FILTER" "${extra[@]}"
    fi
    if has demo && [ "$tool" = initcheck ]; then
      sanitize "$log" "$LIMIT" "SPARSE3D_NO_CACHING=1" initcheck "ModelGpu.ForwardMatchesTheCpuBackend" --kernel-name "$FILTER"
    fi
    return 0
  }
  TOOLS=""
  has nocache && TOOLS="memcheck racecheck initcheck synccheck"
  has graphs && [ -z "$TOOLS" ] && TOOLS="memcheck initcheck synccheck"
  has demo && [ -z "$TOOLS" ] && TOOLS="initcheck"
  declare -A pid start
  for tool in $TOOLS; do
    rm -f "/tmp/$tool.full.log"
    tool_run "$tool" &
    pid[$tool]=$!; start[$tool]=$(date +%s)
  done
  for tool in $TOOLS; do
    wait "${pid[$tool]}"
    secs=$(( $(date +%s) - ${start[$tool]} ))
    log="/tmp/$tool.full.log"
    grep -q "^#### rc 124" "$log" && state="TIMED OUT" || state="done"
    grep -qE "^#### rc [1-9]" "$log" && track 1
    # Per process: its error summary, tests passed, exit code.
    runs=$(awk '/^#### [a-z]+ \[/{f=$0; sub(/^#### [a-z]+ /,"",f)} /ERROR SUMMARY|RACECHECK SUMMARY/{e=$0} /PASSED  \] [0-9]+ test/{p=$4}
                /^#### rc/{gsub(/.*SUMMARY: /,"",e); printf "%s: %s, %s passed, rc %s | ", f, e, p, $3; e=""; p="0"}' "$log")
    summary+=("$tool ($state, ${secs}s): $runs")
    { echo "== kernels in reports:"; grep -oE "in (void )?[_A-Za-z0-9:]+[<(]" "$log" | sort | uniq -c | sort -rn | head -20
      echo "== failed tests:"; grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | sort -u
      echo "== head:"; head -c 120000 "$log"; echo; echo "== tail:"; tail -c 30000 "$log"; } > "$OUT/$tool.log"
  done
  printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
}

# nocache, graphs and demo are parts of one run of the four tools (mode `tools`).
PARTS=""; modes=()
for m in "$@"; do
  case $m in nocache|graphs|demo) PARTS="$PARTS $m";; *) modes+=("$m");; esac
done
PARTS=${PARTS# }
[ -n "$PARTS" ] && modes+=(tools)
run_modes sanitizers memcheck -- "${modes[@]}"
