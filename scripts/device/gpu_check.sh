#!/usr/bin/env bash
# One device call: fingerprint, GPU tests, compute-sanitizer memcheck on the small GPU
# tests, then the full trellis2-shape-1024 preset on the 3,664- and 30,227-token payloads
# (15 steps, CFG 7.5 every step, serial and batched CFG) in the engine and in the PyTorch
# oracle, compared. Full logs under $OUT; a short table last.
# Usage: scripts/device/gpu_check.sh [tests|sanitizer|model|golden|all]...
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
parts=${*:-all}
want() { [[ " $parts " == *" $1 "* || " $parts " == *" all "* ]]; }
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

$BIN/sparse3d info | tee "$OUT/fingerprint.txt"
$BIN/sparse3d info --json > "$OUT/fingerprint.json"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee -a "$OUT/fingerprint.txt"

if want tests; then
  $BIN/sparse3d_gpu_tests 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |OK \]|FAILED  \]" | tail -n 80
  note "gpu tests: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')"
fi

if want sanitizer; then
  SPARSE3D_NO_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check full \
    $BIN/sparse3d_gpu_tests --gtest_filter='*Small*' > "$OUT/memcheck.log" 2>&1
  note "memcheck (small GPU tests, caching off): exit $? ($(grep -c 'Invalid' "$OUT/memcheck.log") invalid accesses; $(grep -E '^\[  PASSED  \]' "$OUT/memcheck.log"))"
fi

if want model; then
  W=/tmp/s3d; mkdir -p $W
  [ -f $W/shape.json ] || $BIN/sparse3d make-checkpoint --preset trellis2-shape-1024 --seed 1 --out $W/shape > "$OUT/make.log" 2>&1
  [ -f $W/pl/manifest.json ] || $BIN/sparse3d make-payloads --set benchmark --out $W/pl >> "$OUT/make.log" 2>&1
  small=$(python3 -c "import json;a=json.load(open('$W/pl/manifest.json'))['assets'];print(a[0]['name'])")
  large=$(python3 -c "import json;a=[x for x in json.load(open('$W/pl/manifest.json'))['assets'] if x['set']=='default'];print(a[-1]['name'])")
  $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $large \
    --max-device-memory 4 > "$OUT/oom.log" 2>&1
  note "memory estimate check (--max-device-memory 4, $large): exit $? : $(tail -n 1 "$OUT/oom.log")"
  for mode in serial batched; do
    flag=""; [ $mode = batched ] && flag="--enable batched_cfg"
    $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $small --asset $large \
      $flag --dump-first-forward --out $W/engine-$mode 2>&1 | tee "$OUT/engine-$mode.log" | grep -E "tokens:|error"
    python3 tools/torch_ref/run.py --checkpoint $W/shape.json --manifest $W/pl/manifest.json --asset $small --asset $large \
      --cfg-mode $mode --dump-first-forward --device cuda --time --out $W/torch-$mode > "$OUT/torch-$mode.log" 2>&1
    tail -n 3 "$OUT/torch-$mode.log"
    for a in $small $large; do
      python3 tools/torch_ref/compare.py $W/engine-$mode/$a.safetensors $W/torch-$mode/$a.safetensors \
        > "$OUT/compare-$mode-$a.txt" 2>&1
      note "engine vs torch, $mode CFG, $a:"; sed 's/^/    /' "$OUT/compare-$mode-$a.txt" | tee -a "$summary"
    done
  done
fi

if want golden; then
  # Inputs made by the engine (make-checkpoint tiny, make-payloads small), carried in .deps.
  python3 tools/torch_ref/selftest.py > "$OUT/oracle_selftest.log" 2>&1
  note "oracle selftest: $(tail -n 1 "$OUT/oracle_selftest.log")"
  rm -rf /tmp/golden
  python3 tools/torch_ref/make_golden.py --checkpoint .deps/golden_in/tiny.json \
    --manifest .deps/golden_in/payloads/manifest.json --device cuda --out /tmp/golden > "$OUT/golden.log" 2>&1
  note "golden: exit $? ($(ls /tmp/golden | tr '\n' ' '))"
  tar -C /tmp -cf "$OUT/golden.tar" golden
fi

echo "================ summary ================"
cat "$summary"
