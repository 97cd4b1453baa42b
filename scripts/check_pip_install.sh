#!/usr/bin/env bash
# `pip install .` as docs/PYTHON.md gives it: from this tree, into a clean virtual environment,
# with pip's own isolated build environment (scikit-build-core, nanobind, cudnn-frontend and
# cuDNN's headers from PyPI, as pyproject.toml's build requirements say), then the installed
# package: its version, `python -m sparse3d_engine info`, the stub the build wrote
# (_native.pyi) and a tiny request on the CPU. CI runs it (scripts/test.sh) on a fresh clone.
#   PYTHON=3.11 scripts/check_pip_install.sh     # a command or a pyenv version (default 3.11)
# ccache, where installed, is passed to CMake through its environment (the command stays the
# docs' own); BUILD_JOBS sets the build's parallelism. Prints "check_pip_install: ok" last.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-3.11}
PYTHON=$(scripts/python_of.sh "$PYTHON") || true
command -v "$PYTHON" >/dev/null || [ -x "$PYTHON" ] || {
  echo "check_pip_install: no python $PYTHON here: pip install . was not checked"; exit 0; }
tree=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/sparse3d-pip-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
py=$work/venv/bin/python
"$py" -m pip install -q --disable-pip-version-check --upgrade pip
export PATH="/usr/local/cuda/bin:$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL=${BUILD_JOBS:-$(nproc)}
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache \
    CCACHE_BASEDIR="$tree"
fi
t0=$SECONDS
if ! (cd "$tree" && "$py" -m pip install --disable-pip-version-check .) > "$work/pip.log" 2>&1; then
  tail -30 "$work/pip.log"
  echo "check_pip_install: FAILED: pip install . (log above)"
  exit 1
fi
echo "check_pip_install: pip install . built and installed in $((SECONDS - t0)) s ($("$py" --version))"
grep -iE "warning.*stub|_native.pyi" "$work/pip.log" | head -3 || true
cd "$work"  # not the tree: the installed package, not the source folder
"$py" - <<'EOF'
import os
import sparse3d_engine as s3d
here = os.path.dirname(s3d.__file__)
assert os.path.exists(os.path.join(here, "_native.pyi")), "the build wrote no _native.pyi"
print("installed:", s3d.__version__, "at", here, "(with _native.pyi)")
EOF
"$py" -m sparse3d_engine --version
"$py" -m sparse3d_engine info > "$work/info.txt"
head -3 "$work/info.txt"
"$py" -m sparse3d_engine make-checkpoint --preset tiny --seed 5 --out "$work/tiny" > /dev/null
"$py" -m sparse3d_engine run --checkpoint "$work/tiny.json" --device cpu --tokens 301 --seed 11 \
  --out "$work/run" > "$work/run.txt"
grep -E "^\[synthetic\] 301 tokens" "$work/run.txt" | cut -c1-110
[ -s "$work/run/synthetic.safetensors" ] || { echo "check_pip_install: FAILED: run wrote no latent"; exit 1; }
echo "check_pip_install: ok"
