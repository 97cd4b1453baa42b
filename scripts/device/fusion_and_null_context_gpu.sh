#!/usr/bin/env bash
# Device call: the GPU suite (fused kernels included), the fused kernels'
# bandwidth vs the copy bandwidth, `sparse3d profile` of one forward for pure_eager and
# kernel_fusion, memcheck over the fused kernels' tests, the gemm_gelu_epilogue check over
# all 30 MLP layers on real payloads, and the null-context paths bitwise over the full
# 15 steps on the full checkpoint. Ordered so that the longest part runs last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
$BIN/sparse3d info > "$OUT/fingerprint.txt"
$BIN/sparse3d_gpu_tests --gtest_filter='-*FullCheckpoint*:EpilogueFullGpu.*' > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" "$OUT/gpu_tests.log" | head -20
$BIN/sparse3d bench-kernels --checkpoint $W/shape.json --out "$OUT" --stem kernels > "$OUT/bench-kernels.log" 2>&1
echo "bench-kernels exit $?"; grep -E "^\| |Copy" "$OUT/kernels.md"
for p in pure_eager kernel_fusion; do
  $BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $SMALL \
    --path $p > "$OUT/profile-$p.md" 2>&1
  echo "profile $p exit $?: $(grep -E 'launches' "$OUT/profile-$p.md" | head -3 | tr '\n' ' ')"
done
export SPARSE3D_FULL_CKPT=$W/shape.json SPARSE3D_FULL_MANIFEST=$W/pl/manifest.json SPARSE3D_FULL_STEPS=15
timeout 200 $BIN/sparse3d_gpu_tests --gtest_filter='EpilogueFullGpu.*' > "$OUT/epilogue_full.log" 2>&1
echo "epilogue full exit $?"; grep -E "over every|\[ model|FAILED|Failure" "$OUT/epilogue_full.log" | head -12
SPARSE3D_NO_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check full \
  $BIN/sparse3d_gpu_tests --gtest_filter="FusedOps.QkRmsNorm*:FusedOps.Cross*:FusedOps.Modulated*:FusedOps.GatedResidual*:FusedOps.MlpGelu*:FusedModelGpu.*" > "$OUT/memcheck.log" 2>&1
echo "memcheck fused exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -n 1); $(grep -E '^\[  PASSED  \]' "$OUT/memcheck.log")"
timeout 260 $BIN/sparse3d_gpu_tests --gtest_filter='NullContextGpu.FullCheckpoint*' > "$OUT/null_full15.log" 2>&1
echo "null-context full 15 steps exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|\[full\] [0-9]+ steps' "$OUT/null_full15.log" | tr '\n' ' ')"
grep -E "Failure|differ" "$OUT/null_full15.log" | head -8
(cd "$OUT" && tar -czf logs.tgz *.log fingerprint.txt profile-*.md && rm -f *.log profile-*.md fingerprint.txt)
