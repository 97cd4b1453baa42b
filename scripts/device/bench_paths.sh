#!/usr/bin/env bash
# Device call: `sparse3d bench` of PATHS (default: pure_eager and beyond) over the 10 default
# payloads, 2 repeats interleaved, the instrumented loop on 1 of the 15 protocol steps (scaled;
# every step does the same work under the protocol), no PyTorch baseline; then `bench-kernels`.
# The report files land in $OUT under STEM.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
PATHS=${PATHS:-"pure_eager beyond"}
STEM=${STEM:-library-bench}
$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
timeout ${BENCH_TIMEOUT:-460} $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets default --paths $PATHS --repeats 2 --warmup 1 --instrument-steps 1 --no-torch \
  --out "$OUT" --stem $STEM > "$OUT/bench.log" 2>&1
echo "bench exit $?"
grep -iE "peaks|estimated|fallback|warning|error" "$OUT/bench.log" | head -12
if [ -n "${KERNELS:-}" ]; then
  timeout 60 $BIN/sparse3d bench-kernels --checkpoint $W/shape.json --out "$OUT" > "$OUT/kernels.log" 2>&1
  echo "bench-kernels exit $?"
fi
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
sed -n '/## Denoise latency/,/## Null/p' "$OUT/$STEM.md" | head -40
