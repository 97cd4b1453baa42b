#!/usr/bin/env bash
# The test command: set-up, build, the CPU test suite (ctest), the installed package
# (scripts/check_install.sh: install, find_package from outside the tree, the example), the
# wheel (scripts/check_wheel.sh: the CUDA 13 / Python 3.12 wheel built, installed into a
# clean virtual environment, `python -m sparse3d_engine`, the Python suite against it, then
# again with PyTorch next to it), and a bounded fuzz run of every parser. GPU tests are a separate executable run on a GPU
# machine (scripts/device/run.sh unit).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
scripts/setup.sh
scripts/build.sh
log=$(mktemp)
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 -j "$(nproc)") 2>&1 | tee "$log"
scripts/check_install.sh
wheel_log=$(mktemp)
scripts/check_wheel.sh 2>&1 | tee "$wheel_log"
if [ -x scripts/fuzz.sh ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh
fi
# ctest's verdict again as the last line, after the fuzzers' output.
summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -n 1)
total=$(echo "$summary" | sed -E 's/.*out of ([0-9]+).*/\1/')
failed=$(echo "$summary" | sed -E 's/.* ([0-9]+) tests failed.*/\1/')
rm -f "$log"
sed -n '/^check_wheel: ok/,$p' "$wheel_log"; rm -f "$wheel_log"
echo "$((total - failed)) passed, $failed failed"
