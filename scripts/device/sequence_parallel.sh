#!/usr/bin/env bash
# One device call: the sequence-parallel tests on the GPU(s) of this machine (the
# device-parametrised tests of tests/parallel/ and tests/gpu/test_sequence_parallel_gpu.cpp:
# full-size blocks at 30,227 tokens over 2-4 simulated ranks, the NCCL group, two GPUs when
# there are two). NCCL is found in python3's site-packages (nvidia/nccl/lib) when the system
# has none. Full logs under $OUT; a short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
NCCL_SITE=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
[ -n "$NCCL_SITE" ] && export LD_LIBRARY_PATH="$NCCL_SITE/lib:$LD_LIBRARY_PATH"
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
nvidia-smi -L | tee -a "$OUT/fingerprint.txt"
note "GPUs: $(nvidia-smi -L | wc -l); NCCL: ${NCCL_SITE:-system}"
$BIN/sparse3d_gpu_tests --gtest_filter="${FILTER:-*SequenceParallel*:ShardPlan*:EngineOnDevices*}" > "$OUT/tests.log" 2>&1
note "tests exit $?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"
grep -E "^\[ sequence parallel \]|FAILED  \]|Failure|error" "$OUT/tests.log" | head -40 | tee -a "$summary"
echo "---- summary"
cat "$summary"
