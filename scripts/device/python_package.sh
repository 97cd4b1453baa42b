#!/usr/bin/env bash
# Device call: the sparse3d wheel built on the CPU machine (dist/, carried), installed with pip
# (no network) into the GPU machine's python3 beside torch; then
#   (1) the wheel's size and a cold `import sparse3d_engine`;
#   (2) `sparse3d run` (the CLI of this tree, build/bin, carried) on the smallest and largest
#       payloads, REPEAT+1 requests each, for the reference latents and request times;
#   (3) the Python tests (tests/python) against the installed package;
#   (4) tools/torch_ref/check_dropin.py: sample() and the TRELLIS.2 drop-in bit for bit vs
#       the CLI, Python overhead, zero copy, streams, and the original (oracle) module vs the
#       drop-in on every payload;
#   (5) the C++ GPU suite with SUITE=1 (it takes minutes; off by default; SUITE_FILTER: a
#       gtest filter).
# Also: ldd --version (the machine's glibc, against the wheel's manylinux tag).
# Prints a table last; logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
source scripts/device/prepare_model.sh
REPEAT=${REPEAT:-5}
PATH_SPEC=${PATH_SPEC:-beyond}
summary=()
$BIN/sparse3d info > "$OUT/fingerprint.txt" 2>&1
summary+=("machine: $(ldd --version | head -1); $(python3 --version)")
wheel=$(ls dist/sparse3d_engine*manylinux*.whl | head -1)
summary+=("wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB")
# What the wheel's module carries: SASS per architecture and PTX.
wheel_abs=$(realpath "$wheel")
(cd /tmp && rm -rf whl && mkdir whl && cd whl && python3 -m zipfile -e "$wheel_abs" . &&
 cuobjdump --list-elf sparse3d_engine/_native*.so | grep -oE "sm_[0-9]+a?" | sort | uniq -c | tr '\n' ' ' > "$OUT/wheel_arch.txt";
 cuobjdump --list-ptx sparse3d_engine/_native*.so | grep -oE "sm_[0-9]+a?" | sort | uniq -c | sed 's/^/ptx /' | tr '\n' ' ' >> "$OUT/wheel_arch.txt") 2>> "$OUT/wheel_arch.txt"
summary+=("wheel kernels: $(cat "$OUT/wheel_arch.txt")")
# With its declared dependencies (nvidia-cublas, nvidia-cudnn-cu13, numpy) resolved against
# what is installed (no index: no network); if that fails, without them, and said so.
if python3 -m pip install --no-index "$wheel" > "$OUT/pip.log" 2>&1; then
  summary+=("pip install --no-index: ok, dependencies satisfied by the installed wheels")
elif python3 -m pip install --no-index --no-deps "$wheel" >> "$OUT/pip.log" 2>&1; then
  summary+=("pip install: only with --no-deps ($(grep -m1 -iE 'no matching|error' "$OUT/pip.log"))")
else
  summary+=("pip install: FAILED ($(tail -1 "$OUT/pip.log"))")
fi
python3 -m pip list 2>/dev/null | grep -iE "nvidia-(cublas|cudnn)|^torch |^numpy " > "$OUT/pip_list.txt"
summary+=("installed: $(tr -s ' ' < "$OUT/pip_list.txt" | tr '\n' ';')")
# A cold import: a fresh interpreter, twice (the second with the files in the page cache),
# without LD_LIBRARY_PATH (the package finds cuBLAS and cuDNN in the NVIDIA wheels).
PYENV="env -u LD_LIBRARY_PATH"
for i in 1 2; do
  imp=$(cd /tmp && $PYENV python3 -c "import time; t=time.perf_counter(); import sparse3d_engine as s3d; print(round(time.perf_counter()-t, 3), 's', s3d.__version__, s3d.__file__, s3d._loader.loaded)" 2>&1 | tail -1)
done
summary+=("import sparse3d_engine (no LD_LIBRARY_PATH): $imp")
case "$imp" in *sparse3d/__init__.py*) ;; *) PYENV=env; summary+=("  (the rest runs with LD_LIBRARY_PATH)");; esac

# (2) The CLI's latents and request times.
REPEAT_LARGE=${REPEAT_LARGE:-2}
assets=""; for i in $(seq 0 $REPEAT); do assets="$assets --asset $SMALL"; done
for i in $(seq 0 $REPEAT_LARGE); do assets="$assets --asset $LARGE"; done
$BIN/sparse3d run --checkpoint $W/shape.json --manifest $W/pl/manifest.json $assets --path $PATH_SPEC \
  --cache-dir $W/cache-py --out $W/cli > "$OUT/cli.log" 2>&1 || summary+=("CLI run FAILED")
python3 - "$OUT/cli.log" "$W/cli_times.json" <<'PY'
import json, re, sys
times = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[(\S+)\] \d+ tokens: set-up ([0-9.]+) s \+ denoise loop ([0-9.]+) s", line)
    if m:
        times.setdefault(m.group(1), []).append(float(m.group(2)) + float(m.group(3)))
json.dump(times, open(sys.argv[2], "w"))
PY
cp $W/cli_times.json "$OUT/cli_times.json"

# (3) The Python tests on the installed package (from /tmp: the tree's python/ is not on the path).
(cd /tmp && $PYENV SPARSE3D_TEST_DATA="$OLDPWD/tests/data" python3 -m pytest -q -p no:cacheprovider \
  "$OLDPWD/tests/python" > "$OUT/pytest.log" 2>&1)
summary+=("pytest (installed wheel): $(tail -1 "$OUT/pytest.log")")

# (4) The drop-in against the CLI and the oracle.
$PYENV python3 tools/torch_ref/check_dropin.py --checkpoint $W/shape.json \
  --manifest $W/pl/manifest.json --cli-out $W/cli --cli-times $W/cli_times.json \
  --parity-assets $SMALL $LARGE --path $PATH_SPEC --repeat $REPEAT --repeat-large $REPEAT_LARGE --cache-dir $W/cache-py \
  --json "$OUT/dropin.json" ${DROPIN_ARGS:-} > "$OUT/dropin.log" 2>&1 || summary+=("check_dropin FAILED: $(tail -3 "$OUT/dropin.log")")

# (5) The C++ GPU suite.
if [ "${SUITE:-0}" = 1 ]; then
  $BIN/sparse3d_gpu_tests --gtest_filter="${SUITE_FILTER:-*}" > "$OUT/gpu_tests.log" 2>&1
  summary+=("gpu suite: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_tests.log" | tr '\n' ' ')")
fi
{ printf '%s\n' "${summary[@]}"; tail -40 "$OUT/dropin.log"; } > "$OUT/summary.txt"
# $OUT comes back with at most 8 files: the summary, the JSONs, the rest in one tarball.
(cd "$OUT" && tar czf logs.tar.gz $(ls *.log pip_list.txt wheel_arch.txt 2>/dev/null) &&
 rm -f *.log pip_list.txt wheel_arch.txt)
cat "$OUT/summary.txt"
