#!/usr/bin/env bash
# Device call (1 of 3 on graphs and batching): the GPU tests of per-request CUDA graphs, the allocator's
# private pools, step tables and multi-asset packing, then `beyond` against pure_eager,
# canonical_cache_combined and beyond without graphs over the 10 default payloads
# (2 repeats, one run). Then beyond_leave_one_out.sh and bench_throughput.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
$BIN/sparse3d_gpu_tests --gtest_filter='CudaGraphsGpu.*:AllocatorPoolGpu.*:ModelGpu.StepTables*:ModelGpu.PackedAssets*' \
  > "$OUT/graphs_tests.log" 2>&1
echo "graph and packing GPU tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/graphs_tests.log" | tr '\n' ' ')"
grep -E "^\[ graphs|step_tables \(|packed vs alone|Failure|FAILED" "$OUT/graphs_tests.log" | head -40
source scripts/device/prepare_model.sh
timeout 500 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json --assets default \
  --paths pure_eager canonical_cache_combined beyond beyond-cuda_graphs \
  --also-compare canonical_cache_combined \
  --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem beyond \
  > "$OUT/bench-beyond.log" 2>&1
echo "bench exit $?"
grep -iE "fallback|warning|error" "$OUT/bench-beyond.log" | head
sed -n '/## Denoise latency/,/## Null/p' "$OUT/beyond.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
