#!/usr/bin/env bash
# Device call: what a TRELLIS.2 user sees of memory and time (tools/torch_ref/pipeline_memory.py):
# the pipeline's denoise stages with TRELLIS.2's own modules and samplers, PyTorch, the drop-in
# as it was (a copy of the weights per engine, workspaces kept: `sparse3d-copy`) and the drop-in's
# defaults (`sparse3d`), each asset once in service order, device-wide memory polled every 2 ms,
# host RSS beside it; restore() checked bit for bit after each drop-in side.
#
# RUNS: space-separated runs, one process each, LOWVRAM/TYPES/SIDES[/LIMIT_GIB]:
#   LOWVRAM off|on; TYPES comma-separated pipeline types (512,1024,1024_cascade,1536_cascade);
#   SIDES comma-separated (pytorch,sparse3d-copy,sparse3d) or "all"; LIMIT_GIB: the device is
#   held down to that many GiB by one allocation made first (which assets complete).
#   Default: "off/1024/all on/1024/all".
# TOKENS (default "3000 7000 12000 20000 31000"): the assets' 64-grid token counts.
# GPU_TESTS=1: first the residency and workspace GPU tests ($BIN/sparse3d_gpu_tests, carried).
# PY_TESTS="test_torch.py ...": those Python test files on the GPU, after the module's build.
# Needs, carried: .deps/trellis2-src (a TRELLIS.2 checkout) and .deps/cudnn_frontend (the
# module is built here from this tree into build-py/, kept while the machine stays warm).
# TIMEOUT_S per run (default 300).
# Writes $OUT/memory_<n>.json, .log and _table.txt per run, $OUT/gpu_tests.log; prints the
# tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
T2=${TRELLIS2:-.deps/trellis2-src}
[ -d "$T2/trellis2/models" ] || { echo "no TRELLIS.2 checkout at $T2"; exit 1; }
summary=("machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)")

if [ "${GPU_TESTS:-0}" = 1 ]; then
  if [ -x "$BIN/sparse3d_gpu_tests" ]; then
    "$BIN/sparse3d_gpu_tests" --gtest_filter='ResidencyGpu.*' > "$OUT/gpu_tests.log" 2>&1
    summary+=("GPU tests ResidencyGpu.*: exit $? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')")
    grep -E "^\[ residency \]|FAILED" "$OUT/gpu_tests.log" | head -20
  else
    summary+=("GPU tests: no $BIN/sparse3d_gpu_tests (carry it)")
  fi
fi

t0=$(date +%s)
build_module
rc_build=$?
summary+=("module built here: exit $rc_build in $(( $(date +%s) - t0 )) s")
[ $rc_build = 0 ] || { tail -n 20 "$OUT/build_module.log"; printf '%s\n' "${summary[@]}"; exit 1; }

if [ -n "${PY_TESTS:-}" ]; then
  # The Python tests named (e.g. "test_torch.py test_residency.py") on this GPU, with the
  # module just built and this machine's PyTorch: their CUDA cases run here and only here.
  files=(); for f in $PY_TESTS; do files+=("tests/python/$f"); done
  SPARSE3D_TEST_DATA=tests/data timeout 300 python3 -m pytest -q \
    -p no:cacheprovider -rs "${files[@]}" > "$OUT/python_tests.log" 2>&1
  summary+=("Python tests ($PY_TESTS) on the GPU: exit $? $(tail -1 "$OUT/python_tests.log")")
fi

n=0
rc=0
tables=()
for run in ${RUNS:-off/1024/all on/1024/all}; do
  n=$((n + 1))
  IFS=/ read -r lv types sides limit <<< "$run"
  args=(--trellis2 "$T2" --device cuda --types ${types//,/ })
  [ "$sides" = all ] || args+=(--sides ${sides//,/ })
  [ "$lv" = on ] && args+=(--low-vram)
  [ -n "${limit:-}" ] && args+=(--limit-gib "$limit")
  [ -n "${TOKENS:-}" ] && args+=(--tokens $TOKENS)
  stem="$OUT/memory_$n"
  t1=$(date +%s)
  timeout "${TIMEOUT_S:-300}" python3 tools/torch_ref/pipeline_memory.py "${args[@]}" \
    --json "$stem.json" --table "${stem}_table.txt" > "$stem.log" 2>&1
  r=$?
  [ $r = 0 ] || rc=$r
  summary+=("run $n ($run): exit $r after $(( $(date +%s) - t1 )) s$( [ $r = 124 ] && echo ' (TIMED OUT)')")
  tables+=("$stem")
done
printf '%s\n' "${summary[@]}"
for stem in "${tables[@]}"; do
  echo
  grep -E "^!!|Traceback|Error" "$stem.log" | head -5
  grep -E "restore\(\) checks" "$stem.log"
  if [ -s "${stem}_table.txt" ]; then cat "${stem}_table.txt"; else tail -n 8 "$stem.log"; fi
done
exit $rc
