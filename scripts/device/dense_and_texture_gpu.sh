#!/usr/bin/env bash
# Device call: the dense sparse-structure flow model (SparseStructureFlowModel) and the texture
# flow model on the H200, against the PyTorch oracle (tools/torch_ref), with the benchmark of
# the dense model:
#   (0) the GPU test suite (DenseGpu.* prints its numbers), in the background during (2)-(3);
#   (1) compute-sanitizer memcheck on DenseGpu.* (caching allocator off);
#   (2) trellis2-ss-16 (synthetic, released shapes) on the `dense` payloads (16^3 grid,
#       L = 1,029), TRELLIS.2's released sparse-structure settings: engine (pure_eager and
#       beyond) vs oracle, first forward and final latent;
#   (3) trellis2-tex-1024 on two payloads with a real concat_cond (a shape latent): every
#       execution path vs the oracle, at the released texture settings (12 steps, g = 1,
#       rescale_t 3) and with CFG on every step (6 protocol steps, so that every CFG path runs);
#   (4) `sparse3d bench` on the dense payloads: pure_eager, beyond and the oracle's PyTorch
#       eager, released_sparse_structure settings, plus multi-structure batches 2, 4, 8;
#   (5) the tiny-ss goldens of the C++ CPU tests, by the oracle on the GPU (-> golden-dense.tar).
# PARTS (default "suite memcheck ss tex bench golden") picks parts; TEX_PATHS (default: all
# six) the texture model's paths; BATCH ("2 4 8"; empty: none) the bench's batches.
# Prints a summary last; everything else is in $OUT/results.tgz, rewritten after each part (a
# run cut short still returns what it finished).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
W=/tmp/s3d; mkdir -p $W
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
PARTS=" ${PARTS:-suite memcheck ss tex bench golden} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
R=$OUT/r; mkdir -p $R
save() { tar -C "$OUT" -czf "$OUT/results.tgz" r; }
$BIN/sparse3d info > "$R/fingerprint.txt" 2>&1
suite=
if want suite; then
  timeout 420 $BIN/sparse3d_gpu_tests --gtest_filter="${SUITE_FILTER:-*}" > "$R/gpu_tests.log" 2>&1 & suite=$!
fi

want memcheck && SPARSE3D_NO_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
  --kernel-name kns=s3d $BIN/sparse3d_gpu_tests --gtest_filter="DenseGpu.Transposes*:DenseGpu.Unbiased*:DenseGpu.Forward*" \
  > "$R/memcheck.log" 2>&1
want memcheck && note "memcheck DenseGpu exit $?: $(grep -E 'ERROR SUMMARY' "$R/memcheck.log" | tail -n 1)"

# ---- (2) the dense model vs the oracle
if want ss; then
[ -f $W/ss.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-ss-16 --seed 1 --out $W/ss > "$OUT/make.log" 2>&1
[ -f $W/dense/manifest.json ] || $BIN/sparse3d make-payloads --set dense --out $W/dense >> "$OUT/make.log" 2>&1
SS_SETTINGS="--steps 12 --rescale-t 5 --cfg 7.5 --interval 0.6 1.0 --guidance-rescale 0.7"
oracle() {  # label checkpoint manifest "oracle args" assets...
  local label=$1 ck=$2 man=$3 oargs=$4; shift 4
  local sel=""; for a in "$@"; do sel="$sel --asset $a"; done
  python3 tools/torch_ref/run.py --checkpoint $ck --manifest $man $sel $oargs --device cuda \
    --dump-first-forward --time --out $W/o-$label > "$OUT/oracle-$label.log" 2>&1 || note "oracle $label exit $?: $(tail -n 2 "$OUT/oracle-$label.log" | tr '\n' ' ')"
}
SS_ASSETS="s00-grid16-4096 s01-grid16-4096"
oracle ss $W/ss.json $W/dense/manifest.json "$SS_SETTINGS --cfg-mode serial" $SS_ASSETS
for path in pure_eager beyond; do
  sel=""; for a in $SS_ASSETS; do sel="$sel --asset $a"; done
  $BIN/sparse3d run --checkpoint $W/ss.json --manifest $W/dense/manifest.json $sel --path $path \
    $SS_SETTINGS --dump-first-forward --cache-dir $W/cache --out $W/e-ss-$path > "$OUT/engine-ss-$path.log" 2>&1 \
    || note "engine dense $path exit $?: $(grep error "$OUT/engine-ss-$path.log" | head -1)"
done
for path in pure_eager beyond; do
  for a in $SS_ASSETS; do
    python3 tools/torch_ref/compare.py $W/e-ss-$path/$a.safetensors $W/o-ss/$a.safetensors \
      --max-rel v_cond=1e-2 --max-rel v_uncond=1e-2 --max-rel latent=3e-2 > "$OUT/compare-ss-$path-$a.txt" 2>&1
    note "dense $path $a: exit $? | $(grep -E '^  (latent|v_cond|v_uncond) ' "$OUT/compare-ss-$path-$a.txt" | awk '{print $1, $3}' | tr '\n' ' ')"
  done
done
fi
# ---- (3) the texture model vs the oracle, every path
if want tex; then
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
      || note "engine tex $setting $path exit $?: $(grep error "$OUT/engine-tex-$setting-$path.log" | head -1)"
    for a in $TEX_ASSETS; do
      python3 tools/torch_ref/compare.py $W/e-tex-$setting-$path/$a.safetensors $W/o-tex-$setting/$a.safetensors \
        --max-rel v_cond=1e-2 --max-rel v_uncond=1e-2 --max-rel latent=3e-2 > "$OUT/compare-tex-$setting-$path-$a.txt" 2>&1
      note "texture $setting $path $a: exit $? | $(grep -E '^  (latent|v_cond|v_uncond) ' "$OUT/compare-tex-$setting-$path-$a.txt" | awk '{print $1, $3}' | tr '\n' ' ')"
    done
  done
done
fi
mv "$OUT"/*.log "$OUT"/compare-*.txt $R/ 2>/dev/null; save

if [ -n "$suite" ]; then
  wait $suite; note "gpu tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$R/gpu_tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|tiny-ss" "$R/gpu_tests.log" | head -30 | tee -a "$summary"
  save
fi

# ---- (4) the dense benchmark (nothing else on the GPU now)
if want bench; then
[ -f $W/ss.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-ss-16 --seed 1 --out $W/ss > /dev/null 2>&1
[ -f $W/dense/manifest.json ] || $BIN/sparse3d make-payloads --set dense --out $W/dense > /dev/null 2>&1
BATCH=${BATCH-2 4 8}
$BIN/sparse3d bench --protocol repeated --checkpoint $W/ss.json --manifest $W/dense/manifest.json --paths pure_eager beyond \
  --sampler released_sparse_structure --warmup 1 --repeats 3 ${BATCH:+--batch $BATCH} --python python3 \
  --out "$R" --stem bench-dense > "$R/bench-dense.log" 2>&1
note "bench dense exit $?"
grep -E "speedup|geomean|x$|ratio" "$R/bench-dense.md" 2>/dev/null | head -n 25 | tee -a "$summary"
save
fi

# ---- (5) goldens of the tiny dense model
if want golden; then
$BIN/sparse3d make-checkpoint --preset tiny-ss --seed 5 --out $W/gold_in/tiny-ss > /dev/null 2>&1
$BIN/sparse3d make-payloads --set dense-small --out $W/gold_in/payloads > /dev/null 2>&1
rm -rf /tmp/golden-dense
python3 tools/torch_ref/make_golden.py --checkpoint $W/gold_in/tiny-ss.json \
  --manifest $W/gold_in/payloads/manifest.json --device cuda --out /tmp/golden-dense > "$OUT/golden.log" 2>&1
note "golden-dense: exit $? ($(ls /tmp/golden-dense 2>/dev/null | tr '\n' ' '))"
[ -d /tmp/golden-dense ] && cp -r /tmp/golden-dense $R/
mv "$OUT/golden.log" $R/ 2>/dev/null
fi
mv "$OUT"/*.log "$OUT"/compare-*.txt $R/ 2>/dev/null; save
rm -rf $R
echo "================ summary ================"
cat "$summary"
