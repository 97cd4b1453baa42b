#!/usr/bin/env bash
# Device call: TRELLIS.2's three denoise stages end to end (pipeline type 1024_cascade: sparse
# structure, shape 512 -> 1024 cascade, texture 1024), TRELLIS.2's own PyTorch modules and
# samplers against the sparse3d drop-in (sparse3d_engine.trellis2.accelerate), in one process, with
# the same random weights of the released shapes, conditions and noise, on a small and a large
# synthetic asset: time, peak memory and final-latent relative L2 per stage
# (tools/torch_ref/pipeline_e2e.py says what is synthetic and what replaces the decoders).
#
# ORDER=service (the default): per low_vram setting (LOW_VRAM_MODES, "0 1"; or
# LOW_VRAM=0|1 for one) one process that runs, on each side, a warm-up asset once (PyTorch's
# first pipeline run of the process; sparse3d's first after accelerate()), then five gyroid
# assets of distinct token counts (about 4,000 to 21,000 at the 1024 stages) once each, in the
# same order, with an empty qualification cache of its own: per stage and total times. About
# 6-7 minutes (the module build ~2 min, each process ~2-2.5 min).
# ORDER=repeated: as before, the small and large assets, WARMUP + REPEAT runs each per side.
#
# Needs, carried: .deps/trellis2-src (a TRELLIS.2 checkout; TRELLIS2=DIR for another) and
# .deps/cudnn_frontend (the module is built here from this tree; WHEEL=1: dist/'s wheel).
# DEVICES="0 1" (service order): the drop-in splits each request over those GPUs
# (accelerate(pipeline, devices=[0, 1])); the PyTorch side stays on the first.
# Environment: ORDER (service), PATH_SPEC (engine path, empty: the fastest), E2E_ARGS (more
# options of pipeline_e2e.py), TIMEOUT_S (480 for ORDER=repeated; 200 per process for service);
# service: LOW_VRAM_MODES ("0 1"), SERVICE_TOKENS ("4000 7000 10500 15000 21000"),
# WARMUP_TOKENS (2500), PASSES (1); repeated: ASSETS ("small large"), WARMUP (1), REPEAT (1),
# LOW_VRAM=1 (the pipeline's low_vram moves, timed).
# Writes $OUT/pipeline_e2e.json (everything), $OUT/pipeline_e2e.log and
# $OUT/pipeline_e2e_table.txt (service: $OUT/pipeline_e2e_service_lowvram{0,1}.{json,log} and
# _table.txt), $OUT/pip.log; prints a summary, then the table(s) last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
T2=${TRELLIS2:-.deps/trellis2-src}
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
# Without LD_LIBRARY_PATH when the package finds its libraries itself (python_package.sh).
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
