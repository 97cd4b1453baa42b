#!/usr/bin/env bash
# Device call (issue 6, first contact): the issue-6 GPU tests (graphs, pools, step_tables,
# packing), then a one-repeat bench of beyond with and without graphs at a small and a mid
# token count, to find what breaks before the full bench.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
$BIN/sparse3d_gpu_tests --gtest_filter='CudaGraphsGpu.*:AllocatorPoolGpu.*:ModelGpu.StepTables*:ModelGpu.PackedAssets*' \
  > "$OUT/issue6_tests.log" 2>&1
echo "issue 6 GPU tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/issue6_tests.log" | tr '\n' ' ')"
grep -E "graphs|step_tables \(|packed vs alone|Failure|FAILED|rror" "$OUT/issue6_tests.log" | head -30
source scripts/device/prepare_model.sh
timeout 300 $BIN/sparse3d bench --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets $SMALL $MID --paths canonical_cache_combined beyond beyond-cuda_graphs \
  --repeats 1 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem smoke \
  > "$OUT/bench-smoke.log" 2>&1
echo "bench exit $?"
grep -iE "graph|fallback|error|rror" "$OUT/bench-smoke.log" | head -20
sed -n '/## Summary/,/## Null/p' "$OUT/smoke.md" | head -40
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
