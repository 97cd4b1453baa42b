#!/usr/bin/env bash
# Device call (issue 6; written in session 2, NOT RUN YET): the GPU tests of per-request CUDA
# graphs, the allocator's private pools, step_tables and multi-asset packing, then a bench of
# `beyond` against pure_eager and canonical_cache_combined over the 10 default payloads
# (2 repeats) with its leave-one-out on 3 payloads. Follow with bench_throughput.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
$BIN/sparse3d_gpu_tests --gtest_filter='CudaGraphsGpu.*:AllocatorPoolGpu.*:ModelGpu.StepTables*:ModelGpu.PackedAssets*' \
  > "$OUT/issue6_tests.log" 2>&1
echo "issue 6 GPU tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/issue6_tests.log" | tr '\n' ' ')"
grep -E "\[ graphs|step_tables \(|packed vs alone|Failure|FAILED" "$OUT/issue6_tests.log" | head -30
$BIN/sparse3d bench --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
  --paths pure_eager canonical_cache_combined beyond --ablate \
  --ablate-assets a00-sphere-3664 a04-sphere-9360 a07-blob-18912 --also-compare canonical_cache_combined \
  --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem beyond \
  > "$OUT/bench-beyond.log" 2>&1
echo "bench exit $?"
sed -n '/## Summary/,/## Null/p' "$OUT/beyond.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
