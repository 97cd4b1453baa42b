#!/usr/bin/env bash
# Device call: the benchmark's service protocol over the 10 default payloads, the
# README's headline. `sparse3d bench --protocol both`: per path (beyond, fast) a fresh engine
# with an empty qualification cache, one warm-up request at 2,748 tokens (no payload has that
# count), then every payload's first request, timed as the whole call; then the repeated
# protocol on the same engines; then the PyTorch baseline (tools/torch_ref/run.py --service)
# in the same order in the same run. About 6-7 minutes with the defaults (checkpoint and
# payloads ~1 min when /tmp/s3d is cold, engines ~3.5 min, PyTorch ~2.5 min).
#
# Binaries from build/bin (built on the CPU machine and carried; BIN=DIR for another).
# Environment: PATHS ("beyond fast"), REPEATS (1: timed repeats per cell after the first
# requests), ASSETS (default), WARMUP_TOKENS (0: the bench's choice), INSTRUMENT_STEPS (1),
# TORCH=0 (no baseline), TIMEOUT_S (480, the bench as a whole).
# Writes under $OUT/r: service.{json,md,svg} (the engine-only report as soon as the engines
# finish, then the whole one), service.log, torch-eager-service.json/.log (the baseline's
# timing file and log), fingerprint.txt; all of it also in $OUT/results.tgz. Prints a summary,
# then the headline tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
R=$OUT/r; mkdir -p $R
$BIN/sparse3d info > $R/fingerprint.txt 2>&1
summary=("machine: $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null | head -1)")

torch=(--torch tools/torch_ref/run.py --python python3)
[ "${TORCH:-1}" = 0 ] && torch=(--no-torch)
rm -f /tmp/sparse3d_torch_eager.json /tmp/sparse3d_torch_eager.json.log
t0=$(date +%s)
timeout "${TIMEOUT_S:-480}" $BIN/sparse3d bench --checkpoint $W/shape.json \
  --manifest $W/pl/manifest.json --assets ${ASSETS:-default} --paths ${PATHS:-beyond fast} \
  --protocol both --repeats "${REPEATS:-1}" --warmup 1 --instrument-steps "${INSTRUMENT_STEPS:-1}" \
  --warmup-tokens "${WARMUP_TOKENS:-0}" "${torch[@]}" --out $R --stem service > $R/service.log 2>&1
rc=$?
summary+=("sparse3d bench --protocol both: exit $rc after $(( $(date +%s) - t0 )) s$( [ $rc = 124 ] && echo ' (TIMED OUT: the engine-only report is kept)')")
[ -f /tmp/sparse3d_torch_eager.json ] && cp /tmp/sparse3d_torch_eager.json $R/torch-eager-service.json
[ -f /tmp/sparse3d_torch_eager.json.log ] && cp /tmp/sparse3d_torch_eager.json.log $R/torch-eager-service.log
tar -C $R -czf "$OUT/results.tgz" .

echo "---- summary"
printf '%s\n' "${summary[@]}"
grep -E "^\[warm-up\]|did not run|^sparse3d: error" $R/service.log | head -8
sed -n '/^fallbacks:/,/^$/p' $R/service.log | head -8
if [ -f $R/service.md ]; then
  grep -E "^- Settings" $R/service.md | cut -c1-400
  echo
  # Where the first requests spent their time, then the two headline tables last.
  sed -n '/^## Service protocol: inside/,/^## Repeated protocol/p' $R/service.md | grep -E "^\|"
  echo
  sed -n '/^## Service protocol: each asset/,/^## Service protocol: inside/p' $R/service.md |
    grep -E "^\||^## Service protocol: (each|speedup)"
else
  echo "no report (see $R/service.log):"; tail -20 $R/service.log
fi
exit $rc
