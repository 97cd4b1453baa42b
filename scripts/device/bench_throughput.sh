#!/usr/bin/env bash
# Device call (issue 6 item 4, not run yet): multi-asset batching. The packed-vs-alone GPU
# test, then `sparse3d bench --batch` at a small and a large token count: K copies of the
# asset in one request, assets per hour vs K, latency per asset, for the best path so far in
# serial and batched CFG.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
$BIN/sparse3d_gpu_tests --gtest_filter='ModelGpu.PackedAssets*' > "$OUT/packed_test.log" 2>&1
echo "packed test exit $?: $(grep -E 'packed vs alone|PASSED|FAILED' "$OUT/packed_test.log" | tr '\n' ' ')"
$BIN/sparse3d bench --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets $SMALL $MID --paths canonical_cache_combined canonical_cache_combined+batched_cfg \
  --batch 2 4 8 --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" \
  --stem throughput > "$OUT/bench-throughput.log" 2>&1
echo "bench exit $?"
sed -n '/## Throughput/,/## Null/p' "$OUT/throughput.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
