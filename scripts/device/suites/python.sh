#!/usr/bin/env bash
# Suite `python`: the Python package on the GPU machine. Logs and JSON under $OUT/<mode>; a
# table last.
#   package  the sparse3d wheel built on the CPU machine (dist/, carried), installed with pip
#            (no network) beside the machine's torch; then (1) the wheel's size and kernels and
#            a cold `import sparse3d_engine`; (2) `sparse3d run` (build/bin, carried) on the
#            smallest and largest payloads, REPEAT+1 (5) and REPEAT_LARGE+1 (2) requests, for
#            the reference latents and request times; (3) the Python tests against the
#            installed package; (4) tools/torch_ref/check_dropin.py (PATH_SPEC, beyond;
#            DROPIN_ARGS): sample() and the TRELLIS.2 drop-in bit for bit vs the CLI, Python
#            overhead, zero copy, streams, the oracle module vs the drop-in on every payload;
#            (5) SUITE=1: the C++ GPU tests (suite unit; SUITE_FILTER, a gtest filter).
#   wheels   the CUDA 13 and CUDA 12 wheels (dist/, carried) installed with pip --target beside
#            the machine's python3, as a user beside PyTorch installs them: import after torch
#            (the library copies used), `python -m sparse3d_engine info / make-checkpoint /
#            run` on the GPU, tools/torch_compile_check.py, the Python suite; the CUDA 12
#            wheel where the machine has CUDA 12 libraries, its latent against CUDA 13's.
#   cli      the package's command line on the GPU: builds the module and the `sparse3d`
#            executable from this tree (build-py, env.sh's build_module), then
#            `python -m sparse3d_engine info`, `make-checkpoint --preset tiny` and
#            `run --tokens 3001 --device cuda` through `python -m sparse3d_engine` and through
#            the executable (the same file, byte for byte), and pytest test_cli.py,
#            test_interrupt.py, test_package.py. Carry .deps/cudnn_frontend/include,
#            .deps/devsys, .deps/xatlas.
#   comfyui  the ComfyUI pack (integrations/comfyui) through ComfyUI's own executor on the
#            GPU: the CUDA 13 wheel (dist/, carried) and ComfyUI's Python needs
#            ($COMFY/wheels, COMFY=.deps/comfy) installed with pip --target beside the
#            machine's torch, ComfyUI's source ($COMFY/ComfyUI), stand-ins for the start-up
#            imports the graphs never use ($COMFY/fallback: scipy, av, torchvision; after the
#            machine's own). tests/python/test_comfyui_pack.py with SPARSE3D_COMFY_DEVICE=cuda
#            (the graphs' engines on the GPU, against direct engines there), and the headless
#            script's own output. What $COMFY held: bench/results/2026-12-04-h200-comfyui/.
# Default: package.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
# The caller's library and command paths, before env.sh's: mode wheels runs as a user would.
USER_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-} USER_PATH=$PATH
source scripts/device/env.sh
source scripts/device/suites/lib.sh

# (unindented: the here-documents below are Python)
mode_package() {
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
  --cache-dir $W/cache-py --out $W/cli > "$OUT/cli.log" 2>&1 || { track 1; summary+=("CLI run FAILED"); }
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
  --json "$OUT/dropin.json" ${DROPIN_ARGS:-} > "$OUT/dropin.log" 2>&1 || { track 1; summary+=("check_dropin FAILED: $(tail -3 "$OUT/dropin.log")"); }

# (5) The C++ GPU suite.
[ "${SUITE:-0}" = 1 ] && unit_tests "${SUITE_FILTER:-*}"
{ printf '%s\n' "${summary[@]}"; tail -40 "$OUT/dropin.log"; } > "$OUT/summary.txt"
# $OUT comes back with at most 8 files: the summary, the JSONs, the rest in one tarball.
(cd "$OUT" && tar czf logs.tar.gz $(ls *.log pip_list.txt wheel_arch.txt 2>/dev/null) &&
 rm -f *.log pip_list.txt wheel_arch.txt)
cat "$OUT/summary.txt"
}

mode_wheels() {
export LD_LIBRARY_PATH=$USER_LD_LIBRARY_PATH PATH=$USER_PATH
tree=$PWD
W=/tmp/wheels-gpu
rm -rf "$W" && mkdir -p "$W"
summary=()

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
summary+=("GPU: $(head -1 "$OUT/gpu.txt"); $(python3 --version); torch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)")
python3 -m pip list 2>/dev/null | grep -iE "^nvidia|^torch |^jax|^numpy " > "$OUT/pip_list.txt"
find / -xdev \( -name 'libcublasLt.so.1[23]*' -o -name 'libcudnn.so.9*' -o -name 'libnvrtc.so.1[23]*' \
  -o -name 'libcudart.so.1[23]*' \) 2>/dev/null | grep -v "^/proc" | sort > "$OUT/cuda_libs.txt"
cu12_dirs=$(grep -E 'libcublasLt.so.12|libnvrtc.so.12|libcudart.so.12' "$OUT/cuda_libs.txt" | xargs -r -n1 dirname | sort -u | tr '\n' ':')
summary+=("CUDA 12 libraries on the machine: $(grep -cE '\.so\.12' "$OUT/cuda_libs.txt") files (${cu12_dirs:-none})")

# One tiny checkpoint for both wheels (written by the first), one request.
install_and_check() {  # $1: label, $2: wheel, $3: extra LD_LIBRARY_PATH
  # pip's --target: installed next to the machine's torch and NVIDIA wheels, which stay
  # visible (a virtual environment made from python3, itself one, would not see them).
  local label=$1 wheel=$2 site=$W/site-$1
  if ! python3 -m pip install --no-index --no-deps -q --target "$site" "$wheel" > "$OUT/$label-pip.log" 2>&1; then
    track 1; summary+=("$label: pip install FAILED ($(tail -1 "$OUT/$label-pip.log"))"); return 1
  fi
  local py="env LD_LIBRARY_PATH=${3:-} PYTHONPATH=$site python3"
  (cd /tmp && $py - > "$OUT/$label-import.txt" 2>&1 <<'EOF'
import logging, time
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
t = time.perf_counter()
import torch  # first, as a TRELLIS.2 script does
import sparse3d_engine as s3d
print("import torch + sparse3d_engine: %.2f s" % (time.perf_counter() - t))
for lib in s3d._loader.libraries():
    print("%-20s %-9s %-24s %s" % (lib["soname"], lib["version"], lib["source"], lib["path"]))
EOF
  ) || { track 1; summary+=("$label: import FAILED ($(tail -1 "$OUT/$label-import.txt"))"); return 1; }
  summary+=("$label: $(basename "$wheel"), import after torch:")
  while read -r line; do summary+=("    $line"); done < <(grep -E "^lib" "$OUT/$label-import.txt")
  [ -f "$W/tiny.json" ] || $py -m sparse3d_engine make-checkpoint --preset tiny --seed 5 --out "$W/tiny" > /dev/null
  $py -m sparse3d_engine info > "$OUT/$label-info.txt" 2>&1
  if $py -m sparse3d_engine run --checkpoint "$W/tiny.json" --device cuda --tokens 3001 --seed 11 \
       --out "$W/out-$label" > "$OUT/$label-run.txt" 2> "$OUT/$label-run.log"; then
    summary+=("  python -m sparse3d_engine run (GPU, tiny, 3,001 tokens): ok")
  else
    track 1; summary+=("  python -m sparse3d_engine run: FAILED ($(tail -1 "$OUT/$label-run.log"))")
  fi
  if (cd /tmp && $py "$tree/tools/torch_compile_check.py" --checkpoint "$W/tiny.json" --device cuda \
        --json "$OUT/$label-torch-compile.json" > "$OUT/$label-torch-compile.txt" 2>&1); then
    summary+=("  torch.compile(fullgraph=True, inductor) on the GPU: $(tail -1 "$OUT/$label-torch-compile.txt")")
  else
    summary+=("  torch.compile check FAILED: $(grep -m1 -E 'FAIL|Error' "$OUT/$label-torch-compile.txt")")
  fi
  (cd /tmp && SPARSE3D_TEST_DATA=$tree/tests/data timeout 900 $py -m pytest -q -p no:cacheprovider \
     "$tree/tests/python" > "$OUT/$label-pytest.txt" 2>&1)
  summary+=("  Python suite (installed wheel, torch present): $(tail -1 "$OUT/$label-pytest.txt")")
}

w13=$(ls dist/sparse3d_engine_cu13-*cp312-abi3*manylinux*.whl 2>/dev/null | head -1)
w12=$(ls dist/sparse3d_engine_cu12-*cp312-abi3*manylinux*.whl 2>/dev/null | head -1)
[ -n "$w13" ] && install_and_check cu13 "$w13" "" || summary+=("cu13: no wheel in dist/")
if [ -z "$w12" ]; then
  summary+=("cu12: no wheel in dist/")
elif [ -z "$cu12_dirs" ]; then
  summary+=("cu12: NOT RUN on the GPU: this machine has no CUDA 12 cuBLAS/NVRTC/runtime (see cuda_libs.txt)")
else
  install_and_check cu12 "$w12" "$cu12_dirs"
  python3 - "$W/out-cu13" "$W/out-cu12" > "$OUT/cu12-vs-cu13.txt" 2>&1 <<'EOF'
import glob, json, os, struct, sys
import numpy as np
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
        f.seek(0); raw = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[base + a:base + b], dtype=np.float32).reshape(v["shape"])
    return out
a = read(glob.glob(os.path.join(sys.argv[1], "*.safetensors"))[0])
b = read(glob.glob(os.path.join(sys.argv[2], "*.safetensors"))[0])
for k in a:
    x, y = a[k].astype(np.float64), b[k].astype(np.float64)
    print("%s: rel L2 %.3e, identical bits: %s" % (k, np.linalg.norm(x - y) / np.linalg.norm(x), np.array_equal(a[k], b[k])))
EOF
  summary+=("cu12 vs cu13 latent (same checkpoint, request, path): $(head -1 "$OUT/cu12-vs-cu13.txt")")
fi

printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
}

mode_cli() {
summary=()
t0=$SECONDS
if ! build_module; then tail -40 "$OUT/build_module.log"; exit 1; fi
cmake --build build-py --target sparse3d -j 16 >> "$OUT/build_module.log" 2>&1 &&
  export SPARSE3D_CLI=$PWD/build-py/bin/sparse3d
summary+=("module and executable built in $((SECONDS - t0)) s")
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' \
  > "$OUT/torch.txt" 2>&1
summary+=("$(cat "$OUT/torch.txt")")

python3 -m sparse3d_engine info > "$OUT/info.txt" 2>&1
summary+=("info: $(grep '^gpu:' "$OUT/info.txt" | cut -c1-110)")
while read -r line; do summary+=("  $line"); done < <(sed -n '/libraries loaded:/,$p' "$OUT/info.txt" | tail -n +2)

W=/tmp/command_line_gpu
rm -rf "$W" && mkdir -p "$W"
python3 -m sparse3d_engine make-checkpoint --preset tiny --seed 5 --out "$W/tiny" > /dev/null
args=(run --checkpoint "$W/tiny.json" --device cuda --tokens 3001 --seed 11)
python3 -m sparse3d_engine "${args[@]}" --out "$W/py" > "$OUT/run_python_m.txt" 2>&1
rc=$?
track $rc
summary+=("python -m sparse3d_engine run (GPU, 3,001 tokens): exit $rc; $(grep -m1 '^\[synthetic\] 3001 tokens' "$OUT/run_python_m.txt" | cut -c1-100)")
if [ -n "${SPARSE3D_CLI:-}" ]; then
  "$SPARSE3D_CLI" "${args[@]}" --out "$W/cli" > "$OUT/run_executable.txt" 2>&1
  if cmp -s "$W/py/synthetic.safetensors" "$W/cli/synthetic.safetensors"; then
    summary+=("  the executable's file: the same bytes")
  else
    track 1; summary+=("  the executable's file: DIFFERENT ($(cmp "$W/py/synthetic.safetensors" "$W/cli/synthetic.safetensors" 2>&1 | head -1))")
  fi
fi

SPARSE3D_TEST_DATA=tests/data python3 -m pytest -q -p no:cacheprovider tests/python/test_cli.py \
  tests/python/test_interrupt.py tests/python/test_package.py > "$OUT/pytest.txt" 2>&1
track $?
summary+=("pytest test_cli, test_interrupt, test_package (GPU machine): $(tail -n 1 "$OUT/pytest.txt")")
grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -10 | while read -r l; do echo "  $l"; done
echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
}

mode_comfyui() {
export LD_LIBRARY_PATH=$USER_LD_LIBRARY_PATH PATH=$USER_PATH
summary=()
C=${COMFY:-.deps/comfy}
site=/tmp/comfyui-gpu-site
rm -rf "$site"
w13=$(ls dist/sparse3d_engine_cu13-*cp312-abi3*manylinux*.whl 2>/dev/null | head -1)
[ -n "$w13" ] && [ -d "$C/ComfyUI" ] || { echo "comfyui: needs dist/ (the CUDA 13 wheel) and $C/ComfyUI"; exit 1; }
extra=()
python3 -c "import packaging" 2>/dev/null || extra=("$C"/wheels-extra/*.whl)
python3 -m pip install --no-index --no-deps -q --target "$site" "$w13" "$C"/wheels/*.whl "${extra[@]}" \
  > "$OUT/pip.log" 2>&1
track $? || { tail -5 "$OUT/pip.log"; exit 1; }
summary+=("installed: $(basename "$w13") and $(ls "$C"/wheels/*.whl | wc -l) of ComfyUI's wheels (--target)")
for m in scipy av torchvision; do
  python3 -c "import $m" 2>/dev/null && summary+=("  $m: the machine's") || summary+=("  $m: the stand-in")
done
export PYTHONPATH=$site SPARSE3D_COMFY_DEVICE=cuda SPARSE3D_COMFY_EXTRA_PATH=$PWD/$C/fallback \
  COMFYUI_DIR=$PWD/$C/ComfyUI SPARSE3D_TEST_DATA=$PWD/tests/data
python3 -m pytest -q -p no:cacheprovider tests/python/test_comfyui_pack.py -rs > "$OUT/pytest.txt" 2>&1
track $?
summary+=("pytest test_comfyui_pack.py, SPARSE3D_COMFY_DEVICE=cuda: $(tail -n 1 "$OUT/pytest.txt")")
SPARSE3D_COMFY_CACHE=/tmp/s3d-comfy-gpu python3 tests/python/comfyui_headless.py "$COMFYUI_DIR" \
  integrations/comfyui/sparse3d_comfyui > "$OUT/headless.txt" 2> "$OUT/headless.err"
rc=$?
track $rc
summary+=("comfyui_headless.py on the GPU: exit $rc; $(grep -c 'bit for bit' "$OUT/headless.txt") bit-for-bit checks printed")
while read -r l; do summary+=("  $l"); done < <(grep -E \
  "^(first|again|new-option|model-patch|model-oracle|latent|KSampler|comfyui_headless)" \
  "$OUT/headless.txt" | cut -c1-150)
summary+=("accelerate node (GPU): $(grep -m1 'shape_slat_flow_model_512' "$OUT/headless.txt" | cut -c1-140)")
echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
}

run_modes python package -- "$@"
