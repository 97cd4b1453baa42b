#!/usr/bin/env bash
# Suite `multi-gpu`: sequence parallelism, on a machine with two or more GPUs (kind
# nvidia-h200-x2; the tests run on one GPU too, the two-GPU ones then skip). NCCL is found in
# python3's site-packages (nvidia/nccl/lib) when the system has none.
#   tests  the sequence-parallel tests (suite unit with GTEST_FILTER, default
#          *SequenceParallel*:ShardPlan*:EngineOnDevices*): full-size blocks at 30,227 tokens
#          over 2-4 simulated ranks, the NCCL group, two GPUs when there are two.
#   bench  `sparse3d bench --devices $DEVICES` (0,1) of PATHS (fast) over ASSETS (all: the 10
#          default payloads and the long tail to 49,152 tokens): every path on the first GPU
#          alone ("fast") and split over the listed GPUs ("fast@0,1") in the same run, the
#          service protocol then 1 repeat; QUEUE=1: also the queue table (bench --queue).
#          TOKENS (comma-separated counts, e.g. 49152,61440): a manifest of those counts
#          instead. Report files under STEM (multi-gpu); BENCH_TIMEOUT (480). A 10-minute call
#          holds the tests and either ASSETS=default (with QUEUE=1) or TOKENS=....
# Default: tests bench.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
source scripts/device/env.sh
source scripts/device/suites/lib.sh
nccl_path

mode_tests() {
  $BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
  nvidia-smi -L | tee -a "$OUT/fingerprint.txt"
  nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
  echo "GPUs: $(nvidia-smi -L | wc -l); NCCL: ${NCCL_SITE:-system}"
  unit_tests "${GTEST_FILTER:-*SequenceParallel*:ShardPlan*:EngineOnDevices*}"
}

mode_bench() {
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
  timeout ${BENCH_TIMEOUT:-480} $BIN/sparse3d bench --protocol both --checkpoint $W/shape.json \
    --manifest $MANIFEST --assets $ASSETS --paths $PATHS --devices $DEVICES --repeats 1 \
    --warmup 1 --instrument-steps 1 --no-torch ${QUEUE:+--queue} --out "$OUT" --stem $STEM \
    > "$OUT/bench.log" 2>&1
  track $?; echo "bench exit $?"
  grep -iE "sequence parallel|fallback|warning|error" "$OUT/bench.log" | head -12
  sed -n '/## Serving a queue/,/^$/p' "$OUT/$STEM.md" | head -12
  sed -n '/## Denoise latency/,/## Null/p' "$OUT/$STEM.md" | head -40
}

run_modes multi-gpu "tests bench" -- "$@"
