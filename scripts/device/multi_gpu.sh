#!/usr/bin/env bash
# Device call on a machine with two or more GPUs (kind nvidia-h200-x2): the sequence-parallel
# tests (the two-GPU ones run only there), then `sparse3d bench --devices $DEVICES` of PATHS
# (default fast) over ASSETS (default: all, the 10 default payloads and the long tail to
# 49,152 tokens): every path on the first GPU alone ("fast") and split over the listed GPUs
# ("fast@0,1") in the same run, the service protocol (each asset once on a fresh engine after
# a warm-up) then 1 repeat; with QUEUE=1 also the queue table (one-GPU engines against one
# split engine, bench --queue). With TOKENS (comma-separated counts, e.g. 49152,61440) the
# assets are a manifest of those counts instead (the tail past the benchmark set: TRELLIS.2's
# 1024 stage has no cap). Report files under $OUT (STEM); the latency table last.
# A 10-minute call holds the tests and either ASSETS=default (with QUEUE=1) or TOKENS=...;
# the whole set in one call may pass BENCH_TIMEOUT (the engine-only report is kept).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
NCCL_SITE=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
[ -n "$NCCL_SITE" ] && export LD_LIBRARY_PATH="$NCCL_SITE/lib:$LD_LIBRARY_PATH"
source scripts/device/prepare_model.sh
DEVICES=${DEVICES:-0,1}; PATHS=${PATHS:-fast}; STEM=${STEM:-multi-gpu}; ASSETS=${ASSETS:-all}
MANIFEST=$W/pl/manifest.json
if [ -n "${TOKENS:-}" ]; then
  MANIFEST=$W/pl-${TOKENS//,/-}/manifest.json
  [ -f $MANIFEST ] || $BIN/sparse3d make-payloads --set benchmark --tokens "$TOKENS" \
    --out "$(dirname $MANIFEST)" >> "$OUT/make.log" 2>&1
  ASSETS=all
fi
$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
nvidia-smi -L >> "$OUT/fingerprint.txt"
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
$BIN/sparse3d_gpu_tests --gtest_filter='*SequenceParallel*:ShardPlan*:EngineOnDevices*' > "$OUT/tests.log" 2>&1
echo "tests exit $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/tests.log" | tr '\n' ' ')"
grep -E "^\[ sequence parallel \]" "$OUT/tests.log"
timeout ${BENCH_TIMEOUT:-480} $BIN/sparse3d bench --protocol both --checkpoint $W/shape.json \
  --manifest $MANIFEST --assets $ASSETS --paths $PATHS --devices $DEVICES --repeats 1 \
  --warmup 1 --instrument-steps 1 --no-torch ${QUEUE:+--queue} --out "$OUT" --stem $STEM \
  > "$OUT/bench.log" 2>&1
echo "bench exit $?"
grep -iE "sequence parallel|fallback|warning|error" "$OUT/bench.log" | head -12
sed -n '/## Serving a queue/,/^$/p' "$OUT/$STEM.md" | head -12
sed -n '/## Denoise latency/,/## Null/p' "$OUT/$STEM.md" | head -40
