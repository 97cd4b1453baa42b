#!/usr/bin/env bash
# Device call: (0) the GPU test suite, in the background while (1) runs; (1) every execution
# path bit for bit against a reference build of the engine
# (REF: build-before/bin/sparse3d, built from the commit before the library refactor) at the
# smallest and largest benchmark payloads (3,664 and 30,227 tokens), serial and batched CFG,
# STEPS protocol steps, plus the default run (fast, released sampler), and the same paths on the
# dense trellis2-ss-16 over two 16^3 grids (DENSE_PATHS; empty: none); (2) cold and warm start
# of `sparse3d run` (process start to first latent) at 3,664 tokens with an empty and a filled
# qualification cache (START= empty: skipped). Prints a table last; logs and the parity lines
# go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
REF=${REF:-build-before/bin/sparse3d}
STEPS=${STEPS:-4}
# The checkpoint and payloads are made by the reference binary: both builds read the same files.
BIN_SAVED=$BIN; BIN=$(dirname "$REF"); source scripts/device/prepare_model.sh; BIN=$BIN_SAVED
$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
suite=
if [ -n "${SUITE-1}" ]; then $BIN/sparse3d_gpu_tests > "$OUT/gpu_tests.log" 2>&1 & suite=$!; fi
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
    summary+=("$name: bitwise"); echo "$name: bitwise"; else summary+=("$name: DIFFERS"); echo "$name: DIFFERS"; fi
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
[ -n "$suite" ] && wait $suite && summary+=("gpu suite: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests ran' "$OUT/gpu_tests.log" | tr '\n' ' ')")
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
[ -f "$OUT/gpu_tests.log" ] && grep -E 'FAILED|Failure' "$OUT/gpu_tests.log" | head -20
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
[ -d $W/runs ] && tar -czf "$OUT/runs.tgz" -C $W runs
printf '%s\n' "${summary[@]}"
