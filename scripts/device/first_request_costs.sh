#!/usr/bin/env bash
# Device call: what a request at a token count the engine has not met costs against its
# repeat, as a service sees it. One process per path (sparse3d run): a warm-up asset, then
# each of the 10 benchmark payloads twice in a row (the first sight of its token count, then
# the repeat), with the released sampler; then a guidance-1 run (no unconditional branch:
# nothing may be qualified). Each request prints its whole-call time, the null-context time
# and the work done once per new shape (cuDNN graphs, cuBLASLt plans, device blocks).
# Optional first: the GPU tests named by TESTS (a gtest filter; empty to skip).
# Environment: RUNS ("beyond fast": PATH or PATH@B, B the smallest cuDNN sequence-length
# bucket, SPARSE3D_SDPA_MIN_BUCKET; default the engine's), TESTS, SAMPLER (released).
# Writes $OUT/first_request_<path>.log, $OUT/first_request.txt; prints the table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
RUNS=${RUNS:-"beyond fast"}
if [ -n "${TESTS:-}" ]; then
  $BIN/sparse3d_gpu_tests --gtest_filter="$TESTS" > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests ($TESTS) exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]|Failure" "$OUT/gpu_tests.log" | head -20
fi
$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
# Warm-up: the long-tail's first asset (35,000 tokens), outside the default set.
WARM=$(python3 -c "import json;print([a['name'] for a in json.load(open('$W/pl/manifest.json'))['assets'] if a['set']!='default'][0])")
assets=(--asset "$WARM")
for a in $DEFAULT_ASSETS; do assets+=(--asset "$a" --asset "$a"); done
table=$OUT/first_request.txt; : > "$table"
for run in $RUNS; do
  p=${run%@*}; bucket=default; [ "$run" != "$p" ] && bucket=${run#*@}
  env_bucket=(); [ "$bucket" != default ] && env_bucket=(SPARSE3D_SDPA_MIN_BUCKET=$bucket)
  log=$OUT/first_request_$p-$bucket.log
  rm -rf /tmp/s3d-fr-cache
  env "${env_bucket[@]}" timeout 500 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --path "$p" --sampler "${SAMPLER:-released}" --cache-dir /tmp/s3d-fr-cache --out /tmp/fr-out \
    "${assets[@]}" > "$log" 2>&1
  echo "run $p (smallest attention bucket $bucket) exit $?" >> "$table"
  python3 - "$log" "$run" >> "$table" <<'PY'
import re, sys
log, path = sys.argv[1], sys.argv[2]
calls = []  # (asset, whole, null, first_use)
for line in open(log):
    m = re.match(r"\[(\S+)\] whole call ([\d.]+) s: null context ([\d.]+) s; first use: (.*)$", line)
    if m: calls.append((m.group(1), float(m.group(2)), float(m.group(3)), m.group(4)))
print(f"{path}: asset, first call s, repeat s, first/repeat, null ctx s (first), first-use work (first)")
for i in range(1, len(calls) - 1, 2):
    (a, w1, n1, f1), (_, w2, _, _) = calls[i], calls[i + 1]
    print(f"  {a:22s} {w1:8.3f} {w2:8.3f} {w1 / w2:6.3f}x {n1:7.3f}  {f1}")
if calls: print(f"  warm-up {calls[0][0]}: {calls[0][1]:.3f} s, null ctx {calls[0][2]:.3f} s; {calls[0][3]}")
PY
done
# Guidance 1 on every step (TRELLIS.2's texture stage): no null context, no qualification.
rm -rf /tmp/s3d-fr-cache
$BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --cfg 1 \
  --cache-dir /tmp/s3d-fr-cache --out /tmp/fr-out --asset $SMALL --asset $MID > "$OUT/first_request_cfg1.log" 2>&1
echo "guidance 1 exit $?: $(grep -c 'qualified on the device' "$OUT/first_request_cfg1.log") qualifications, $(grep -c 'null context:' "$OUT/first_request_cfg1.log") probes; $(grep 'whole call' "$OUT/first_request_cfg1.log" | sed 's/^/  /' | tr '\n' ' ')" >> "$table"
cat "$table"
