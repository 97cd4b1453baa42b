#!/usr/bin/env bash
# Device call (2 of 3 on graphs and batching): the whole GPU suite (every contract test, the graph and packing ones
# included), then the leave-one-out over `beyond` (each of its flags off in turn) at three
# token counts, 2 repeats, one run.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
$BIN/sparse3d_gpu_tests > "$OUT/gpu_suite.log" 2>&1
echo "GPU suite exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[==========\]' "$OUT/gpu_suite.log" | tr '\n' ' ')"
grep -E "FAILED|Failure|^step_tables|packed vs" "$OUT/gpu_suite.log" | head -20
echo "suite took $SECONDS s"
source scripts/device/prepare_model.sh
timeout $((575 - SECONDS)) $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --assets a00-sphere-3664 a04-sphere-9360 a07-blob-18912 --paths beyond --ablate \
  --repeats 2 --warmup 1 --instrument-steps 1 --no-torch --out "$OUT" --stem beyond-ablate \
  > "$OUT/bench-ablate.log" 2>&1
echo "bench exit $?"
grep -iE "fallback|warning|error" "$OUT/bench-ablate.log" | head
sed -n '/## Leave-one-out/,/## Null/p' "$OUT/beyond-ablate.md"
(cd "$OUT" && tar -czf logs.tgz *.log && rm -f *.log)
