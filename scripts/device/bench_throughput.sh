#!/usr/bin/env bash
# Device call (3 of 3 on graphs and batching): multi-asset batching. `sparse3d bench --batch` at a small
# and a mid token count: K copies of the asset in one request, assets per hour vs K, latency
# per asset, for canonical_cache_combined (serial CFG) and beyond (batched CFG, graphs).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
timeout $((410 - SECONDS)) $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets $SMALL $MID --paths canonical_cache_combined beyond \
  --batch 2 4 8 --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" \
  --stem throughput > "$OUT/bench-throughput.log" 2>&1
echo "bench exit $?"
sed -n '/## Throughput/,/## Null/p' "$OUT/throughput.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
