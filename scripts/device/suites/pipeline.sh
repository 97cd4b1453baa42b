#!/usr/bin/env bash
# Suite `pipeline`: TRELLIS.2's pipeline end to end, and its memory. Both need, carried,
# .deps/trellis2-src (a TRELLIS.2 checkout; TRELLIS2=DIR for another) and, for the Python module
# built here from this tree into build-py/ (env.sh's build_module), .deps/cudnn_frontend/include,
# .deps/devsys (scripts/device/make_devsys.sh: the GLB export's libraries, which the module
# links) and .deps/xatlas (scripts/setup.sh: xatlas's source, compiled into the module).
#   e2e     TRELLIS.2's three denoise stages (1024_cascade), TRELLIS.2's own PyTorch modules
#           and samplers against the drop-in (sparse3d_engine.trellis2.accelerate), in one
#           process, on synthetic assets: time, peak memory and final-latent relative L2 per
#           stage (tools/torch_ref/pipeline_e2e.py). ORDER=service (default): per low_vram
#           setting (LOW_VRAM_MODES "0 1", or LOW_VRAM=0|1) one process: a warm-up asset, then
#           SERVICE_TOKENS ("4000 7000 10500 15000 21000") once each; WARMUP_TOKENS (2500),
#           PASSES (1), DEVICES ("0 1": the drop-in splits each request), TIMEOUT_S (200 per
#           process). ORDER=repeated: ASSETS ("small large"), WARMUP (1) + REPEAT (1) runs each,
#           LOW_VRAM=1, TIMEOUT_S (480). Both: PATH_SPEC (engine path), E2E_ARGS, WHEEL=1
#           (install dist/'s wheel instead of building the module).
#   memory  what a TRELLIS.2 user sees of memory and time (tools/torch_ref/pipeline_memory.py):
#           PyTorch, the drop-in as it was (`sparse3d-copy`) and its defaults (`sparse3d`),
#           each asset once in service order, device-wide memory polled every 2 ms, host RSS.
#           Ablations: sparse3d-nofit, sparse3d-keep, sparse3d-driver (the workspace from the
#           driver, not PyTorch's caching allocator), sparse3d-copy+OPT (the copy with one of
#           accelerate()'s memory options on), SIDE@SPEC (the harness's --sides). The JSON
#           holds each engine call's own account (plan, loop, first-use work) per stage.
#           RUNS ("off/1024/all on/1024/all": LOWVRAM/TYPES/SIDES[/LIMIT_GIB[/TOKENS]] per
#           process; TOKENS there comma-separated, LIMIT_GIB empty for none), TOKENS ("3000
#           7000 12000 20000 31000": for runs that name none), TIMEOUT_S (300 per run),
#           GPU_TESTS=1 (the ResidencyGpu tests first, suite unit), PY_TESTS ("test_torch.py
#           ...": those Python test files on the GPU after the module's build), FREE_BLOCKS=1
#           (PyTorch's free blocks at each engine call, inside the stages' time).
# Default: e2e.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh
T2=${TRELLIS2:-.deps/trellis2-src}

mode_e2e() {
  ASSETS=${ASSETS:-small large}
  summary=()
  if [ ! -d "$T2/trellis2/models" ]; then
    echo "no TRELLIS.2 checkout at $T2 (carry it there, or TRELLIS2=DIR)"; exit 1
  fi
  summary+=("machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1); $(python3 --version 2>&1); torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)")

  # The package: by default built here from this tree (16 cores, sm_90a, about two minutes: the
  # wheel in dist/ may be older than the tree); WHEEL=1 installs dist/'s wheel instead.
  if [ "${WHEEL:-0}" = 1 ]; then
    wheel=$(ls dist/sparse3d-*manylinux*.whl 2>/dev/null | head -1)
    python3 -m pip install --no-index "$wheel" > "$OUT/pip.log" 2>&1 ||
      summary+=("pip install --no-index: dependencies not all satisfied ($(grep -m1 -iE 'no matching|error' "$OUT/pip.log"))")
    if python3 -m pip install --no-index --no-deps --force-reinstall "$wheel" >> "$OUT/pip.log" 2>&1; then
      summary+=("wheel: $(basename "$wheel") installed")
    else
      summary+=("wheel: install FAILED ($(tail -1 "$OUT/pip.log"))")
    fi
  else
    t0=$(date +%s)
    build_module
    rc_build=$?
    summary+=("module built here: exit $rc_build in $(( $(date +%s) - t0 )) s")
    [ $rc_build = 0 ] || tail -n 15 "$OUT/build_module.log"
  fi
  # Without LD_LIBRARY_PATH when the package finds its libraries itself (the python suite's package mode).
  PYENV="env -u LD_LIBRARY_PATH"
  imp=$(cd /tmp && $PYENV python3 -c "import sparse3d_engine as s3d, sparse3d_engine.trellis2 as t; print(s3d.__version__, s3d.__file__, 'FLOW_MODELS', len(t.FLOW_MODELS))" 2>&1 | tail -1)
  case "$imp" in
    *FLOW_MODELS*) ;;
    *) PYENV=env
       imp=$(cd /tmp && python3 -c "import sparse3d_engine as s3d, sparse3d_engine.trellis2 as t; print(s3d.__version__, s3d.__file__, 'FLOW_MODELS', len(t.FLOW_MODELS))" 2>&1 | tail -1)
       case "$imp" in *FLOW_MODELS*) summary+=("  (sparse3d imports only with LD_LIBRARY_PATH)");; esac;;
  esac
  summary+=("import sparse3d_engine: $imp")

  if [ "${ORDER:-service}" = service ]; then
    # One process per low_vram setting: each is a fresh service (its own first runs, its own
    # empty qualification cache, made and removed by pipeline_e2e.py).
    modes=${LOW_VRAM_MODES:-${LOW_VRAM:-0 1}}
    rc=0
    tables=()
    for lv in $modes; do
      stem="$OUT/pipeline_e2e_service_lowvram$lv"
      args=(--trellis2 "$T2" --device cuda --order service --warmup 1 --repeat "${PASSES:-1}"
            --service-tokens ${SERVICE_TOKENS:-4000 7000 10500 15000 21000}
            --warmup-tokens "${WARMUP_TOKENS:-2500}" --json "$stem.json" --table "${stem}_table.txt")
      [ -n "${PATH_SPEC:-}" ] && args+=(--path "$PATH_SPEC")
      [ -n "${DEVICES:-}" ] && args+=(--devices $DEVICES)
      [ "$lv" = 1 ] && args+=(--low-vram)
      t0=$(date +%s)
      $PYENV timeout "${TIMEOUT_S:-200}" python3 tools/torch_ref/pipeline_e2e.py "${args[@]}" ${E2E_ARGS:-} \
        > "$stem.log" 2>&1
      r=$?
      [ $r = 0 ] || rc=$r
      summary+=("pipeline_e2e.py --order service, low_vram $lv: exit $r after $(( $(date +%s) - t0 )) s$( [ $r = 124 ] && echo ' (TIMED OUT)')")
      tables+=("${stem}_table.txt")
    done
    printf '%s\n' "${summary[@]}"
    for lv in $modes; do
      stem="$OUT/pipeline_e2e_service_lowvram$lv"
      echo "-- low_vram $lv: accelerate(), problems, whole run"
      grep -E "^accelerate\(\)|^whole run|^!! |Traceback|Error:" "$stem.log" | head -8
    done
    for t in "${tables[@]}"; do
      echo
      if [ -s "$t" ]; then cat "$t"; else echo "no table $t (see ${t%_table.txt}.log):"; tail -8 "${t%_table.txt}.log"; fi
    done
    exit $rc
  fi

  args=(--trellis2 "$T2" --device cuda --assets $ASSETS --warmup "${WARMUP:-1}" --repeat "${REPEAT:-1}"
        --cache-dir /tmp/s3d-e2e-cache --json "$OUT/pipeline_e2e.json" --table "$OUT/pipeline_e2e_table.txt")
  [ -n "${PATH_SPEC:-}" ] && args+=(--path "$PATH_SPEC")
  [ "${LOW_VRAM:-0}" = 1 ] && args+=(--low-vram)
  t0=$(date +%s)
  $PYENV timeout "${TIMEOUT_S:-480}" python3 tools/torch_ref/pipeline_e2e.py "${args[@]}" ${E2E_ARGS:-} \
    > "$OUT/pipeline_e2e.log" 2>&1
  rc=$?
  summary+=("pipeline_e2e.py: exit $rc after $(( $(date +%s) - t0 )) s$( [ $rc = 124 ] && echo ' (TIMED OUT)')")

  printf '%s\n' "${summary[@]}"
  # The run's own lines (tqdm's progress bars left out): assets, models, what accelerate() did,
  # per-run times, the report, problems.
  tr '\r' '\n' < "$OUT/pipeline_e2e.log" | grep -vE "it/s\]|s/it\]|^\[(SPARSE|ATTENTION)\]|^\s*$" |
    grep -vE "^asset +stage|^-{20,}|^(small|large|tiny) " | tail -60
  if [ -s "$OUT/pipeline_e2e_table.txt" ]; then
    echo; cat "$OUT/pipeline_e2e_table.txt"
  else
    echo "no table (see $OUT/pipeline_e2e.log):"; tail -20 "$OUT/pipeline_e2e.log"
  fi
  exit $rc
}

mode_memory() {
  [ -d "$T2/trellis2/models" ] || { echo "no TRELLIS.2 checkout at $T2"; exit 1; }
  summary=("machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)")

  [ "${GPU_TESTS:-0}" = 1 ] && unit_tests 'ResidencyGpu.*:ResidencyOnDevice.*'

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
    IFS=/ read -r lv types sides limit toks <<< "$run"
    args=(--trellis2 "$T2" --device cuda --types ${types//,/ })
    [ "$sides" = all ] || args+=(--sides ${sides//,/ })
    [ "$lv" = on ] && args+=(--low-vram)
    [ -n "${limit:-}" ] && args+=(--limit-gib "$limit")
    [ "${FREE_BLOCKS:-0}" = 1 ] && args+=(--free-blocks)
    if [ -n "${toks:-}" ]; then args+=(--tokens ${toks//,/ })
    elif [ -n "${TOKENS:-}" ]; then args+=(--tokens $TOKENS); fi
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
}

run_modes pipeline e2e -- "$@"
