#!/usr/bin/env bash
# Device call: the GPU test suite, compute-sanitizer memcheck on the small GPU tests (caching
# allocator off), a backtrace of any crashing test, and the CLI's memory-estimate refusal.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
$BIN/sparse3d info > "$OUT/fingerprint.txt"
FILTER=${FILTER:-*}
$BIN/sparse3d_gpu_tests --gtest_filter="$FILTER" > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')"
grep -E "FAILED|Failure" "$OUT/gpu_tests.log" | head -20
if grep -q "Segmentation fault\|Aborted" "$OUT/gpu_tests.log" || ! grep -q "PASSED" "$OUT/gpu_tests.log"; then
  last=$(grep "^\[ RUN" "$OUT/gpu_tests.log" | tail -n 1 | awk '{print $NF}')
  timeout 120 cuda-gdb -batch -ex run -ex bt --args $BIN/sparse3d_gpu_tests --gtest_filter="$last" \
    > "$OUT/crash_bt.log" 2>&1
  grep -E "^#|signal" "$OUT/crash_bt.log" | head -20
fi
SPARSE3D_NO_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check full \
  $BIN/sparse3d_gpu_tests --gtest_filter="*Small*:ModelGpu.*:SdpaGpu.SelfAttention*:SdpaGpu.Rows*:LinearGpu.OddSizes*" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -n 1); $(grep -E '^\[  PASSED  \]' "$OUT/memcheck.log")"
G=.deps/golden_in
$BIN/sparse3d run --checkpoint $G/tiny.json --manifest $G/payloads/manifest.json --asset a02-box-250 \
  --max-device-memory 0.0001 --out /tmp/oom > "$OUT/oom.log" 2>&1
echo "memory refusal exit $?: $(grep error "$OUT/oom.log")"
(cd "$OUT" && tar -czf logs.tgz *.log fingerprint.txt && rm -f *.log)
