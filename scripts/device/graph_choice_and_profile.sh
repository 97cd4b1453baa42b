#!/usr/bin/env bash
# Device call (after the graph and batching benches): `run --graph-choice` on the committed beyond bench
# at two token counts (capture at 3,664; eager at 11,833, where graphs measured 0.2 ms slower),
# and a per-op profile of one beyond forward (kernels eagerly: the profiler refuses graphs).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
timeout 120 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --asset a00-sphere-3664 --asset a05-torus-11833 --path beyond \
  --graph-choice bench/results/2026-11-29-h200-beyond.json --out "$OUT/latents" \
  > "$OUT/run-graph-choice.log" 2>&1
echo "run exit $?"
grep -vE "step +[0-9]+/" "$OUT/run-graph-choice.log" | tail -14
rm -rf "$OUT/latents"
timeout 60 $BIN/sparse3d profile --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
  --asset a00-sphere-3664 --path beyond-cuda_graphs > "$OUT/profile-beyond.md" 2>&1
echo "profile exit $?"
cat "$OUT/profile-beyond.md" | tail -25
