#!/usr/bin/env bash
# The test command: set-up, build, the CPU test suite (ctest), the installed package
# (scripts/check_install.sh: install, find_package from outside the tree, the example), the
# wheel (scripts/check_wheel.sh: the CUDA 13 / Python 3.12 wheel built, installed into a
# clean virtual environment, `python -m sparse3d_engine`, the Python suite against it, then
# again with PyTorch next to it; then the Python 3.10 and 3.11 wheels the same way without
# PyTorch, where those interpreters are installed, e.g. by pyenv; then the CUDA 12 wheel
# without PyTorch, built with a CUDA 12.4 toolkit from package registries), `pip install .` from
# the tree (scripts/check_pip_install.sh: pip's isolated build, as docs/PYTHON.md gives it), and a bounded fuzz run of
# every parser. GPU tests are a separate executable run on a GPU
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
# The wheels of Python 3.10 and 3.11 (one each; 3.12 and later share the stable-ABI one): the
# library's objects come from ccache, so each costs its module, its venv and the suite.
has_python() { command -v "python$1" >/dev/null || scripts/python_of.sh "$1" >/dev/null; }
other_logs=()
for v in 3.10 3.11; do
  other_logs+=("$(mktemp)")
  if has_python "$v"; then
    PYTHON=$v TORCH=0 scripts/check_wheel.sh 2>&1 | tee "${other_logs[-1]}"
  else
    echo "check_wheel: Python $v: no python$v here (pyenv install $v): its wheel was not checked" \
      | tee "${other_logs[-1]}"
  fi
done
# The CUDA 12 wheel (sparse3d-engine-cu12, for TRELLIS.2's PyTorch 2.6 + CUDA 12.4): the 12.4
# toolkit assembled from package registries (scripts/cuda12_toolkit.sh, into .deps/cuda12),
# the wheel built with it and checked like the others, without PyTorch (a torch 2.6 cu124
# install is several GB; docs/PACKAGING.md says where that was checked). CUDA12=0 skips it.
cu12_log=$(mktemp)
if [ "${CUDA12:-1}" = 1 ]; then
  CUDA=12 TORCH=0 scripts/check_wheel.sh 2>&1 | tee "$cu12_log"
else
  echo "check_wheel: CUDA 12: skipped (CUDA12=0)" | tee "$cu12_log"
fi
# `pip install .` as docs/PYTHON.md gives it (pip's isolated build, Python 3.11): every install
# command the docs give runs here. PIP_INSTALL=0 skips it.
pip_log=$(mktemp)
if [ "${PIP_INSTALL:-1}" = 1 ]; then
  scripts/check_pip_install.sh 2>&1 | tee "$pip_log"
else
  echo "check_pip_install: skipped (PIP_INSTALL=0)" | tee "$pip_log"
fi
if [ -x scripts/fuzz.sh ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh
fi
# ctest's verdict again as the last line, after the fuzzers' output.
summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -n 1)
total=$(echo "$summary" | sed -E 's/.*out of ([0-9]+).*/\1/')
failed=$(echo "$summary" | sed -E 's/.* ([0-9]+) tests failed.*/\1/')
rm -f "$log"
sed -n '/^check_wheel: ok/,$p' "$wheel_log"; rm -f "$wheel_log"
for l in "${other_logs[@]}" "$cu12_log"; do grep -E "^check_wheel: |  install: " "$l"; rm -f "$l"; done
grep -E "^check_pip_install: " "$pip_log"; rm -f "$pip_log"
echo "$((total - failed)) passed, $failed failed"
