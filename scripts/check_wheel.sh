#!/usr/bin/env bash
# Checks a wheel the way a user installs it: builds it (scripts/build_wheel.sh; by default
# the CUDA 13 wheel for Python 3.12, the one CI checks), installs it with its declared
# dependencies into a clean virtual environment of that Python (no build tools, no
# PYTHONPATH, run from outside the tree), then:
#   1. imports it and prints the CUDA libraries it loaded, their versions and folders;
#   2. `python -m sparse3d_engine info`, `make-checkpoint --preset tiny` and `run` on it
#      (the CPU backend where there is no GPU): the wheel alone, no C++ build;
#   3. the Python test suite (tests/python) against the installed package;
#   4. with TORCH=1 (the default), the same with PyTorch installed next to it: the import
#      report then names the copies torch loaded, and the torch.compile(fullgraph=True)
#      tests run.
# Env: CUDA (13), PYTHON (3.12), WHEEL (an existing wheel: skips the build), TORCH (1),
#      TORCH_SPEC (torch: the newest; e.g. "torch==2.6.0", TRELLIS.2's own, for CUDA=12),
#      KEEP=1 keeps the environment (its path is printed).
# Prints one summary line per step last; exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$PWD
CUDA=${CUDA:-13}
PYTHON=${PYTHON:-3.12}
TORCH=${TORCH:-1}
TORCH_SPEC=${TORCH_SPEC:-torch}
wheel=${WHEEL:-}
if [ -z "$wheel" ]; then
  wheel=$(CUDA=$CUDA PYTHON=$PYTHON scripts/build_wheel.sh | tail -n 1)
fi
[ -f "$wheel" ] || { echo "check_wheel: no wheel at '$wheel'" >&2; exit 1; }
py=$(scripts/python_of.sh "$PYTHON") || true

work=$(mktemp -d "${TMPDIR:-/tmp}/sparse3d-wheel.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "check_wheel: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
summary=()
step=""
trap 'echo "check_wheel: FAILED: $step" >&2' ERR
start=$SECONDS

step="a clean virtual environment ($("$py" --version))"
"$py" -m venv "$work/venv"
vpy=$work/venv/bin/python
"$vpy" -m pip install -q --disable-pip-version-check --upgrade pip
step="pip install $(basename "$wheel") (with its declared dependencies) and pytest"
t0=$SECONDS
"$vpy" -m pip install -q --disable-pip-version-check "$wheel" pytest
summary+=("install: $(basename "$wheel") + dependencies in $((SECONDS - t0)) s")
# Nothing of the build tree may be on the path: run from an empty folder.
mkdir -p "$work/run" && cd "$work/run"

step="import, and the libraries it loaded"
"$vpy" - <<'EOF' | tee "$work/import.txt"
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
import sparse3d_engine as s3d
assert "site-packages" in s3d.__file__, s3d.__file__
print("sparse3d_engine", s3d.__version__, "from", s3d.__file__)
for lib in s3d._loader.libraries():
    assert lib["version"] not in (None, "unknown") and lib["ok"], lib
EOF
summary+=("import: $(grep -c '^sparse3d_engine: lib' "$work/import.txt") libraries reported, $(grep -m1 '^sparse3d_engine [0-9]' "$work/import.txt")")

step="python -m sparse3d_engine info / make-checkpoint / run (the wheel alone)"
"$vpy" -m sparse3d_engine info > "$work/info.txt"
"$vpy" -m sparse3d_engine make-checkpoint --preset tiny --seed 1 --out "$work/ckpt/tiny" > /dev/null
"$vpy" -m sparse3d_engine run --checkpoint "$work/ckpt/tiny.json" --tokens 200 --steps 4 \
  --out "$work/out" > "$work/run.txt"
summary+=("python -m sparse3d_engine: info, make-checkpoint, run: $(grep -m1 '^\[synthetic\] 200 tokens' "$work/run.txt" | cut -c1-90)")

step="the Python suite against the installed wheel"
export SPARSE3D_TEST_DATA=$tree/tests/data
unset PYTHONPATH SPARSE3D_CLI
"$vpy" -m pytest -q -p no:cacheprovider "$tree/tests/python" 2>&1 | tee "$work/pytest.txt" | tail -n 3
summary+=("pytest (installed wheel): $(tail -n 1 "$work/pytest.txt")")

if [ "$TORCH" = 1 ]; then
  step="pip install $TORCH_SPEC next to it"
  t0=$SECONDS
  "$vpy" -m pip install -q --disable-pip-version-check "$TORCH_SPEC"
  summary+=("torch $("$vpy" -c 'import torch; print(torch.__version__)') installed in $((SECONDS - t0)) s")
  step="import after torch: the copies torch loaded"
  "$vpy" - <<'EOF' | tee "$work/import-torch.txt"
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
import torch  # first, as a TRELLIS.2 script does
import sparse3d_engine as s3d
for lib in s3d._loader.libraries():
    print(f"{lib['soname']:20} {lib['version']:10} {lib['source']:24} {lib['path']}")
    assert lib["ok"], lib
EOF
  step="the Python suite with torch (torch.compile, the drop-in)"
  "$vpy" -m pytest -q -p no:cacheprovider "$tree/tests/python" 2>&1 | tee "$work/pytest-torch.txt" | tail -n 3
  summary+=("pytest (installed wheel + torch): $(tail -n 1 "$work/pytest-torch.txt")")
fi
trap - ERR
echo "check_wheel: ok in $((SECONDS - start)) s"
printf '  %s\n' "${summary[@]}"
