#!/usr/bin/env bash
# Device call: the gemm_gelu_epilogue check over all 30 MLP layers on real
# payloads (EpilogueFullGpu), then `sparse3d bench` of the null-context paths against
# pure_eager over the 10 default payloads (2 repeats, interleaved; the instrumented loop
# runs 1 of the 15 steps, scaled: every step does the same work under the protocol).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
export SPARSE3D_FULL_CKPT=$W/shape.json SPARSE3D_FULL_MANIFEST=$W/pl/manifest.json SPARSE3D_FULL_STEPS=15
timeout 150 $BIN/sparse3d_gpu_tests --gtest_filter='EpilogueFullGpu.*' > "$OUT/epilogue_full.log" 2>&1
echo "epilogue full exit $?"; grep -E "over every|\[ model|FAILED|Failure" "$OUT/epilogue_full.log" | head -12
$BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
  --paths pure_eager prior_exact_null canonical_cache_null canonical_cache_null+cond_kv_cache \
  --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem null-context \
  > "$OUT/bench-null.log" 2>&1
echo "bench exit $?"
grep -E "peaks|estimated|qualif|M =|fallback" "$OUT/bench-null.log" | head -12
sed -n '/## Summary/,/## How/p' "$OUT/null-context.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
