#!/usr/bin/env bash
# The test command: set-up, build, the CPU test suite (ctest), and a bounded fuzz run of
# every parser. GPU tests are a separate executable run on a GPU machine
# (scripts/device/gpu_tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900 -j "$(nproc)")
if [ -x scripts/fuzz.sh ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh
fi
