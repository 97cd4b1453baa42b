#!/usr/bin/env bash
# Suite `parity`: the engine's results against a reference, bit for bit or within the oracle's
# tolerances. Logs under $OUT/<mode>; a table last.
#   reference     every execution path bit for bit against a reference build of the engine
#                 (REF: build-before/bin/sparse3d) at the smallest and largest benchmark
#                 payloads (3,664 and 30,227 tokens), serial and batched CFG, STEPS (4)
#                 protocol steps, over PARITY_PATHS (all eight), plus the default run (fast,
#                 released sampler), and the same paths on the dense trellis2-ss-16 over two
#                 16^3 grids (DENSE_PATHS; empty: none); then cold and warm start of
#                 `sparse3d run` (process start to first latent) at 3,664 tokens with an empty
#                 and a filled qualification cache (START= empty: skipped).
#   oracle        the full trellis2-shape-1024 preset on the 3,664- and 30,227-token payloads
#                 (15 steps, CFG 7.5 every step, serial and batched CFG) in the engine and in
#                 the PyTorch oracle (tools/torch_ref), compared.
#   dense         trellis2-ss-16 (released shapes) on the `dense` payloads (L = 1,029), the
#                 released sparse-structure settings: pure_eager and beyond vs the oracle.
#   texture       trellis2-tex-1024 on two payloads with a real concat_cond: every path
#                 (TEX_PATHS: all six) vs the oracle, at the released texture settings and with
#                 CFG on every step.
#   golden        the oracle's selftest and the goldens of the C++ CPU tests (inputs carried in
#                 .deps/golden_in) -> golden.tar.
#   golden-dense  the tiny-ss goldens of the C++ CPU tests, by the oracle on the GPU.
#   formats       each weight format but plain (FORMATS: row_scaled) against plain on the shape
#                 model at 3,664 and 30,227 tokens, fast path and pure_eager, released sampler:
#                 the latent within FORMAT_TOL (2e-2) relative L2, and each run's loop time.
#   bench-ref     the new build's speed against the reference build's (REF): `bench --paths
#                 BENCH_PATHS` (fast) at 3,664 and 30,227 tokens (repeated protocol, REPEATS
#                 (2) repeats), the two builds alternating, ROUNDS (2) rounds each; a table of the median
#                 loop per build, path and asset, and their ratio.
# Default: reference.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh

mode_reference() {
  REF=${REF:-build-before/bin/sparse3d}
  STEPS=${STEPS:-4}
  # The checkpoint and payloads are made by the reference binary: both builds read the same files.
  BIN_SAVED=$BIN; BIN=$(dirname "$REF"); source scripts/device/prepare_model.sh; BIN=$BIN_SAVED
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
  ARGS="--checkpoint $W/shape.json --manifest $W/pl/manifest.json"
  summary=()
  check() {  # name, old-args, new-args (ARGS: the checkpoint and manifest)
    local name=$1 old=$2 new=$3
    # Both builds at once (one GPU, plenty of memory): the bits do not depend on timing.
    # Each run's log in $W/runs (tarred into $OUT at the end): $OUT holds few files, so that
    # what a call returns when it runs out of time is the parity lines, not some logs.
    mkdir -p $W/runs
    ($REF run $ARGS $old --dump-first-forward --out $W/old/$name > "$W/runs/old-$name.log" 2>&1 || echo "old $name exit $?" >> "$OUT/errors.txt") &
    $BIN/sparse3d run $ARGS $new --cache-dir $W/cache --dump-first-forward --out $W/new/$name > "$W/runs/new-$name.log" 2>&1 || echo "new $name exit $?" >> "$OUT/errors.txt"
    wait $!
    echo "== $name" >> "$OUT/parity.log"
    if python3 tools/same_bits.py $W/new/$name $W/old/$name >> "$OUT/parity.log" 2>&1; then
      summary+=("$name: bitwise"); echo "$name: bitwise"; else track 1; summary+=("$name: DIFFERS"); echo "$name: DIFFERS"; fi
  }
  PARITY_PATHS=${PARITY_PATHS-pure_eager kernel_fusion prior_exact_null canonical_cache_null canonical_cache_combined beyond fast low_memory}
  for path in $PARITY_PATHS; do
    for mode in serial batched; do
      if [ $path = beyond ] || [ $path = fast ]; then edit=$([ $mode = serial ] && echo "--disable batched_cfg" || echo "")
      else edit=$([ $mode = batched ] && echo "--enable batched_cfg" || echo ""); fi
      common="--asset $SMALL --asset $LARGE --path $path $edit --sampler protocol --steps $STEPS"
      check "$path-$mode" "$common" "$common"
    done
  done
  # The defaults (no --path, no --sampler: fast, and the shape family's released settings)
  # against their explicit spelling in the reference build.
  [ -n "$PARITY_PATHS" ] && check "default-released" "--asset $SMALL --path fast --sampler released" "--asset $SMALL"
  DENSE_PATHS=${DENSE_PATHS-$PARITY_PATHS}
  if [ -n "$DENSE_PATHS" ]; then
    [ -f $W/ss.json ] || $REF make-checkpoint --preset trellis2-ss-16 --seed 1 --out $W/ss >> "$OUT/make.log" 2>&1
    [ -f $W/dense/manifest.json ] || $REF make-payloads --set dense --out $W/dense >> "$OUT/make.log" 2>&1
    ARGS_SHAPE=$ARGS; ARGS="--checkpoint $W/ss.json --manifest $W/dense/manifest.json"
    for path in $DENSE_PATHS; do
      for mode in serial batched; do
        edit=$([ $mode = serial ] && echo "--disable batched_cfg" || echo "--enable batched_cfg")
        common="--asset s00-grid16-4096 --asset s01-grid16-4096 --path $path $edit --sampler released_sparse_structure --steps $STEPS"
        check "dense-$path-$mode" "$common" "$common"
      done
    done
    ARGS=$ARGS_SHAPE
  fi
  # Start-up: process start to first latent, cold (empty qualification cache) then warm.
  start() {  # label [assets...]
    local label=$1; shift
    local assets=""; for x in ${@:-$SMALL}; do assets="$assets --asset $x"; done
    set -- $label
    local t0=$(date +%s.%N)
    $BIN/sparse3d run $ARGS $assets --cache-dir $W/cache-start --out $W/start-$1 > "$OUT/start-$1.log" 2>&1
    local t1=$(date +%s.%N)
    local req=$(grep -oE "set-up [0-9.]+ s \+ denoise loop [0-9.]+ s" "$OUT/start-$1.log" | awk '{print $2 + $7}')
    local load=$(grep -oE "on cuda in [0-9.]+ s" "$OUT/start-$1.log" | awk '{print $4}')
    local null=$(grep -oE "(probed|verdict from the cache|qualified|cache), [0-9.]+ s" "$OUT/start-$1.log" | tr '\n' ' ')
    local written=$(grep -oE "written at unix time [0-9.]+" "$OUT/start-$1.log" | head -1 | awk '{print $5}')
    summary+=("start $1: process start to first latent $(python3 -c "print(round($written - $t0, 3))") s (whole process $(python3 -c "print(round($t1 - $t0, 3))") s), request (set-up + loop) $req s, load $load s, null context: $null")
  }
  # Start-up, alone on the GPU.
  if [ -n "${START-1}" ]; then
    rm -rf $W/cache-start
    start cold
    start warm
    start warm2
    SECOND=$(echo $DEFAULT_ASSETS | cut -d' ' -f2)
    start two-cold $SMALL $SECOND
    start two-warm $SMALL $SECOND
  fi
  [ -s "$OUT/errors.txt" ] && track 1
  (cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
  [ -d $W/runs ] && tar -czf "$OUT/runs.tgz" -C $W runs
  printf '%s\n' "${summary[@]}"
}

mode_oracle() {
  source scripts/device/prepare_model.sh
  $BIN/sparse3d info | tee "$OUT/fingerprint.txt"
  $BIN/sparse3d info --json > "$OUT/fingerprint.json"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee -a "$OUT/fingerprint.txt"
  summary=$OUT/summary.txt
  : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
  small=$(python3 -c "import json;a=json.load(open('$W/pl/manifest.json'))['assets'];print(a[0]['name'])")
  large=$(python3 -c "import json;a=[x for x in json.load(open('$W/pl/manifest.json'))['assets'] if x['set']=='default'];print(a[-1]['name'])")
  for mode in serial batched; do
    flag=""; [ $mode = batched ] && flag="--enable batched_cfg"
    $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $small --asset $large \
      $flag --dump-first-forward --out $W/engine-$mode 2>&1 | tee "$OUT/engine-$mode.log" | grep -E "tokens:|error"
    python3 tools/torch_ref/run.py --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $small --asset $large \
      --cfg-mode $mode --dump-first-forward --device cuda --time --out $W/torch-$mode > "$OUT/torch-$mode.log" 2>&1
    track $?
    tail -n 3 "$OUT/torch-$mode.log"
    for a in $small $large; do
      python3 tools/torch_ref/compare.py $W/engine-$mode/$a.safetensors $W/torch-$mode/$a.safetensors \
        > "$OUT/compare-$mode-$a.txt" 2>&1
      track $?
      note "engine vs torch, $mode CFG, $a:"; sed 's/^/    /' "$OUT/compare-$mode-$a.txt" | tee -a "$summary"
    done
  done
  echo "================ summary ================"
  cat "$summary"
}

# oracle LABEL CHECKPOINT MANIFEST "ORACLE ARGS" ASSETS...: the PyTorch oracle's run into $W/o-LABEL.
oracle() {
  local label=$1 ck=$2 man=$3 oargs=$4; shift 4
  local sel=""; for a in "$@"; do sel="$sel --asset $a"; done
  python3 tools/torch_ref/run.py --checkpoint $ck --manifest $man $sel $oargs --device cuda \
    --dump-first-forward --time --out $W/o-$label > "$OUT/oracle-$label.log" 2>&1 || { track $?; note "oracle $label exit $?: $(tail -n 2 "$OUT/oracle-$label.log" | tr '\n' ' ')"; }
}
# compare_to LABEL ENGINE_DIR ORACLE_DIR ASSETS...: each asset's latent and first forward.
compare_to() {
  local label=$1 e=$2 o=$3 a; shift 3
  for a in "$@"; do
    python3 tools/torch_ref/compare.py $e/$a.safetensors $o/$a.safetensors \
      --max-rel v_cond=1e-2 --max-rel v_uncond=1e-2 --max-rel latent=3e-2 > "$OUT/compare-$label-$a.txt" 2>&1
    track $?
    note "$label $a: exit $? | $(grep -E '^  (latent|v_cond|v_uncond) ' "$OUT/compare-$label-$a.txt" | awk '{print $1, $3}' | tr '\n' ' ')"
  done
}
dense_start() {
  W=/tmp/s3d; mkdir -p $W
  summary="$OUT/summary.txt"; : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
}
dense_end() {
  mkdir -p "$OUT/r"; mv "$OUT"/*.log "$OUT"/compare-*.txt "$OUT"/fingerprint.txt "$OUT/r/" 2>/dev/null
  tar -C "$OUT" -czf "$OUT/results.tgz" r && rm -rf "$OUT/r"
  echo "================ summary ================"
  cat "$summary"
}

mode_dense() {
  dense_start
  [ -f $W/ss.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-ss-16 --seed 1 --out $W/ss > "$OUT/make.log" 2>&1
  [ -f $W/dense/manifest.json ] || $BIN/sparse3d make-payloads --set dense --out $W/dense >> "$OUT/make.log" 2>&1
  SS_SETTINGS="--steps 12 --rescale-t 5 --cfg 7.5 --interval 0.6 1.0 --guidance-rescale 0.7"
  SS_ASSETS="s00-grid16-4096 s01-grid16-4096"
  oracle ss $W/ss.json $W/dense/manifest.json "$SS_SETTINGS --cfg-mode serial" $SS_ASSETS
  for path in pure_eager beyond; do
    sel=""; for a in $SS_ASSETS; do sel="$sel --asset $a"; done
    $BIN/sparse3d run --checkpoint $W/ss.json --manifest $W/dense/manifest.json $sel --path $path \
      $SS_SETTINGS --dump-first-forward --cache-dir $W/cache --out $W/e-ss-$path > "$OUT/engine-ss-$path.log" 2>&1 \
      || { track $?; note "engine dense $path exit $?: $(grep error "$OUT/engine-ss-$path.log" | head -1)"; }
  done
  for path in pure_eager beyond; do
    compare_to "ss-$path" $W/e-ss-$path $W/o-ss $SS_ASSETS
  done
  dense_end
}

mode_texture() {
  dense_start
  [ -f $W/tex.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-tex-1024 --seed 2 --out $W/tex >> "$OUT/make.log" 2>&1
  [ -f $W/texpl/manifest.json ] || $BIN/sparse3d make-payloads --set benchmark --tokens 3664,11833 \
    --concat-channels 32 --out $W/texpl >> "$OUT/make.log" 2>&1
  TEX_ASSETS=$(python3 -c "import json;print(' '.join(a['name'] for a in json.load(open('$W/texpl/manifest.json'))['assets']))")
  for setting in released protocol; do
    if [ $setting = released ]; then S="--steps 12 --rescale-t 3 --cfg 1 --interval 0.6 1.0 --guidance-rescale 0"
    else S="--steps 6 --rescale-t 3 --cfg 7.5 --interval 0 1 --guidance-rescale 0"; fi
    oracle tex-$setting $W/tex.json $W/texpl/manifest.json "$S --cfg-mode serial" $TEX_ASSETS
    for path in ${TEX_PATHS:-pure_eager kernel_fusion prior_exact_null canonical_cache_null canonical_cache_combined beyond}; do
      sel=""; for a in $TEX_ASSETS; do sel="$sel --asset $a"; done
      $BIN/sparse3d run --checkpoint $W/tex.json --manifest $W/texpl/manifest.json $sel --path $path $S \
        --dump-first-forward --cache-dir $W/cache --out $W/e-tex-$setting-$path > "$OUT/engine-tex-$setting-$path.log" 2>&1 \
        || { track $?; note "engine tex $setting $path exit $?: $(grep error "$OUT/engine-tex-$setting-$path.log" | head -1)"; }
      compare_to "tex-$setting-$path" $W/e-tex-$setting-$path $W/o-tex-$setting $TEX_ASSETS
    done
  done
  dense_end
}

mode_golden() {
  # Inputs made by the engine (make-checkpoint tiny, make-payloads small), carried in .deps.
  python3 tools/torch_ref/selftest.py > "$OUT/oracle_selftest.log" 2>&1
  track $?; echo "oracle selftest: $(tail -n 1 "$OUT/oracle_selftest.log")"
  rm -rf /tmp/golden
  python3 tools/torch_ref/make_golden.py --checkpoint .deps/golden_in/tiny.json \
    --manifest .deps/golden_in/payloads/manifest.json --device cuda --out /tmp/golden > "$OUT/golden.log" 2>&1
  track $?; echo "golden: exit $? ($(ls /tmp/golden | tr '\n' ' '))"
  tar -C /tmp -cf "$OUT/golden.tar" golden
}

mode_golden_dense() {
  W=/tmp/s3d; mkdir -p $W
  $BIN/sparse3d make-checkpoint --preset tiny-ss --seed 5 --out $W/gold_in/tiny-ss > /dev/null 2>&1
  $BIN/sparse3d make-payloads --set dense-small --out $W/gold_in/payloads > /dev/null 2>&1
  rm -rf /tmp/golden-dense
  python3 tools/torch_ref/make_golden.py --checkpoint $W/gold_in/tiny-ss.json \
    --manifest $W/gold_in/payloads/manifest.json --device cuda --out /tmp/golden-dense > "$OUT/golden.log" 2>&1
  track $?; echo "golden-dense: exit $? ($(ls /tmp/golden-dense 2>/dev/null | tr '\n' ' '))"
  [ -d /tmp/golden-dense ] && tar -C /tmp -czf "$OUT/golden-dense.tgz" golden-dense
}

mode_formats() {
  source scripts/device/prepare_model.sh
  local tol=${FORMAT_TOL:-2e-2} summary=()
  ARGS="--checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $SMALL --asset $LARGE"
  loop_time() { grep -oE "denoise loop [0-9.]+ s" "$1" | awk '{s = s $3 " "} END {print s}'; }
  for path in fast pure_eager; do
    $BIN/sparse3d run $ARGS --path $path --cache-dir $W/cache-fmt --out $W/fmt-plain-$path > "$OUT/plain-$path.log" 2>&1
    track $? || echo "plain $path exit $?" >> "$OUT/errors.txt"
    for format in ${FORMATS:-row_scaled}; do
      $BIN/sparse3d run $ARGS --path $path --weight-format $format --cache-dir $W/cache-fmt \
        --out $W/fmt-$format-$path > "$OUT/$format-$path.log" 2>&1
      track $? || echo "$format $path exit $?" >> "$OUT/errors.txt"
      python3 tools/same_bits.py $W/fmt-$format-$path $W/fmt-plain-$path --tensors latent --within $tol \
        > "$OUT/compare-$format-$path.txt" 2>&1
      track $?
      summary+=("$format vs plain, $path: $(tr '\n' ';' < "$OUT/compare-$format-$path.txt")")
      summary+=("  loop s (small large): plain $(loop_time "$OUT/plain-$path.log")| $format $(loop_time "$OUT/$format-$path.log")")
      summary+=("  fallbacks: $(grep -E "^ *(gemm_gelu_epilogue|fallback)" "$OUT/$format-$path.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')")
    done
  done
  printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
}

mode_bench_ref() {
  REF=${REF:-build-before/bin/sparse3d}
  source scripts/device/prepare_model.sh
  local common="--checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets $SMALL $LARGE \
    --paths ${BENCH_PATHS:-fast} --protocol repeated --repeats ${REPEATS:-2} --no-torch"
  for round in $(seq 1 ${ROUNDS:-2}); do
    for build in ref new; do
      local bin=$BIN/sparse3d; [ $build = ref ] && bin=$REF
      $bin bench $common --out $OUT --stem $build-$round > "$OUT/$build-$round.log" 2>&1
      track $? || echo "$build round $round exit $?" >> "$OUT/errors.txt"
    done
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
loops = {}
for f in glob.glob(os.path.join(out, "*-[0-9]*.json")):
    build = os.path.basename(f).split("-")[0]
    for c in json.load(open(f)).get("cells", []):
        loops.setdefault((c["path"], c["asset"]), {}).setdefault(build, []).extend(c["loop_seconds"])
print(f"{'path':12} {'asset':18} {'ref s':>8} {'new s':>8} {'new/ref':>8}  (median over every timed loop)")
for (path, asset), by in sorted(loops.items()):
    r, n = statistics.median(by.get("ref", [float("nan")])), statistics.median(by.get("new", [float("nan")]))
    print(f"{path:12} {asset:18} {r:8.4f} {n:8.4f} {n / r:8.4f}")
PY
}

run_modes parity reference -- "$@"
