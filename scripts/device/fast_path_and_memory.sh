#!/usr/bin/env bash
# Device call: the tolerance kernels, the searched library plans, the chunked MLP and memory.
# PARTS (default all, in this order):
#   tests    the GPU suite (new tests first, then everything), compute-sanitizer memcheck on the
#            new kernels' and plans' tests
#   kernels  sparse3d bench-kernels at 3,664 and 30,227 tokens (fast kernels beside their twins)
#   bench    sparse3d bench over the 10 default payloads: pure_eager, beyond, fast (1 timed
#            repeat after a warm-up; about 7 minutes)
#   memory   pure_eager, beyond, fast on the smallest and largest payload (peaks; 3 minutes)
#   ablate   leave-one-out over fast's new flags on the smallest and the middle payload
#   limited  fast under --max-device-memory = the PyTorch model's peak for that asset
#            (LIMITS="asset:GiB ..." from the torch part's torch-eager.json)
#   torch    the PyTorch model (tools/torch_ref, eager) on the 10 payloads: time and peak memory
#   lowmem   49,152 tokens (TRELLIS.2's 1024-cascade cap): fast vs low_memory, peak and time,
#            and low_memory under --max-device-memory 8
# Results are tarred into $OUT/results.tgz after every part, so a run cut short keeps what
# finished. Prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
PARTS=${PARTS:-"tests kernels bench torch lowmem"}  # one call cannot hold them all: see docs
R=$OUT/r; mkdir -p $R
$BIN/sparse3d info > $R/fingerprint.txt 2>&1
pack() { tar -C $R -czf "$OUT/results.tgz" . ; }
summary=()
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has tests; then
  NEW="*FastNorm*:*PlanSearch*:FastPathGpu.*"
  $BIN/sparse3d_gpu_tests --gtest_filter="$NEW" > $R/gpu_tests_new.log 2>&1
  summary+=("new GPU tests exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $R/gpu_tests_new.log | tr '\n' ' ')")
  # The rest, less the 134-second fault sweep over every device allocation (SKIP= to keep it).
  SKIP=${SKIP-FaultsGpu.EveryDeviceAllocationOfAColdRequest}
  $BIN/sparse3d_gpu_tests --gtest_filter="-$NEW${SKIP:+:$SKIP}" > $R/gpu_tests_rest.log 2>&1
  summary+=("rest of the GPU suite exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $R/gpu_tests_rest.log | tr '\n' ' ')")
  grep -h -E "^\[  FAILED  \] [A-Za-z]" $R/gpu_tests_*.log | head -20
  SPARSE3D_NO_CACHING=1 timeout 400 compute-sanitizer --tool memcheck --error-exitcode 1 \
    --leak-check full $BIN/sparse3d_gpu_tests --gtest_filter="*FastNorm*:*PlanSearch*" \
    > $R/memcheck.log 2>&1
  summary+=("memcheck exit $?: $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -n 1)")
  pack
fi

if has kernels; then
  $BIN/sparse3d bench-kernels --checkpoint $W/shape.json --tokens 3664 30227 --out $R --stem kernels > $R/kernels.log 2>&1
  summary+=("bench-kernels exit $?")
  pack
fi

if has bench; then
  timeout 560 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets default --paths pure_eager beyond fast --repeats 1 --warmup 1 --instrument-steps 1 \
    --no-torch --out $R --stem fast > $R/bench.log 2>&1
  summary+=("bench exit $?")
  pack
fi

if has memory; then
  # Memory only: the smallest and largest payload, each path once after a warm-up.
  timeout 200 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets $SMALL $LARGE --paths pure_eager beyond fast --repeats 1 --warmup 1 \
    --instrument-steps 1 --no-torch --out $R --stem memory > $R/memory.log 2>&1
  summary+=("memory bench exit $?")
  pack
fi

if has ablate; then
  timeout 200 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
    --assets $SMALL $MID --paths fast --repeats 1 --warmup 1 --instrument-steps 1 --ablate \
    --ablate-flags fast_modulated_layernorm fast_qk_rmsnorm_rope fast_qk_rmsnorm_cross tuned_gemm tuned_attention \
    --no-torch --out $R --stem fast-ablate > $R/ablate.log 2>&1
  summary+=("leave-one-out exit $?")
  pack
fi

if has limited; then
  for pair in ${LIMITS:-}; do
    a=${pair%%:*}; g=${pair##*:}
    timeout 90 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json \
      --asset $a --path fast --sampler protocol --max-device-memory $g --out /tmp/lim-$a \
      > $R/limited-$a.log 2>&1
    summary+=("fast under $g GiB, $a: exit $?: $(grep -E 'device memory|fallback' $R/limited-$a.log | tr '\n' ' ' | cut -c1-400)")
  done
  pack
fi

if has torch; then
  args=(--checkpoint $W/shape.json --manifest $W/pl/manifest.json --steps 15 --rescale-t 3 --cfg 7.5
        --interval 0 1 --guidance-rescale 0 --cfg-mode serial --device cuda --time --quiet)
  assets=(); for a in $DEFAULT_ASSETS; do assets+=(--asset $a); done
  timeout 240 python3 tools/torch_ref/run.py "${args[@]}" "${assets[@]}" --warmup 1 --repeat 1 \
    --timing-json $R/torch-eager.json > $R/torch-eager.log 2>&1
  summary+=("torch eager exit $?")
  if [ -f $R/fast.json ] && [ -f $R/torch-eager.json ]; then
    $BIN/sparse3d bench-report --result $R/fast.json --torch-timing $R/torch-eager.json \
      --out $R --stem fast-with-torch > $R/report.log 2>&1
    summary+=("merged report exit $?")
  fi
  pack
fi

if has lowmem; then
  [ -f $W/pl49/manifest.json ] || $BIN/sparse3d make-payloads --set benchmark --tokens 49152 \
    --out $W/pl49 >> $R/make.log 2>&1
  timeout 300 $BIN/sparse3d bench --protocol repeated --checkpoint $W/shape.json --manifest $W/pl49/manifest.json \
    --paths fast low_memory --repeats 1 --warmup 1 --instrument-steps 1 --no-torch \
    --out $R --stem lowmem-49152 > $R/lowmem.log 2>&1
  summary+=("low-memory bench exit $?")
  A49=$(python3 -c "import json;print(json.load(open('$W/pl49/manifest.json'))['assets'][0]['name'])")
  timeout 120 $BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl49/manifest.json \
    --asset $A49 --path low_memory --max-device-memory 8 --out /tmp/lm8 > $R/lowmem-run-8gib.log 2>&1
  summary+=("low_memory run under 8 GiB exit $?: $(grep -i 'device memory' $R/lowmem-run-8gib.log | tail -n 1)")
  pack
fi

echo "---- summary"
for s in "${summary[@]}"; do echo "$s"; done
[ -f $R/kernels.md ] && grep -E "^\| (fast|qk|head|modulated|layer)" $R/kernels.md | head -12
[ -f $R/fast.md ] && sed -n '/## Summary: default/,/^$/p' $R/fast.md | head -8
[ -f $R/fast.md ] && sed -n '/## Wall \/ ideal/,/## Device memory/p' $R/fast.md | tail -n 14 | head -13
[ -f $R/fast-with-torch.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/fast-with-torch.md | head -16
[ -f $R/memory.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/memory.md | head -9
[ -f $R/lowmem-49152.md ] && sed -n '/## Denoise latency/,/^## Summary/p' $R/lowmem-49152.md | head -8
[ -f $R/lowmem-49152.md ] && sed -n '/## Device memory per asset/,/^## [A-Z]/p' $R/lowmem-49152.md | head -8
exit 0
