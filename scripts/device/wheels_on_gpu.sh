#!/usr/bin/env bash
# Device call: the wheels built on the CPU machine (dist/, carried) on the GPU, installed the
# way a user beside PyTorch installs them (pip, no network, no build tree):
#   (1) the machine: GPU, driver, python3, torch, and which CUDA 12 / 13 libraries exist;
#   (2) the CUDA 13 wheel (sparse3d_engine_cu13-*-cp312-abi3) installed with pip --target beside
#       the machine's python3 (its torch and NVIDIA wheels): import after torch (the copies it
#       used, their versions), `python -m sparse3d_engine info / make-checkpoint / run` on
#       the GPU, tools/torch_compile_check.py (inductor, fullgraph=True, bits against the
#       direct calls), the Python suite;
#   (3) the CUDA 12 wheel (sparse3d_engine_cu12-*-cp312-abi3), the same where the machine
#       has CUDA 12 cuBLAS, NVRTC, runtime and cuDNN 9; its latent against the CUDA 13
#       wheel's for the same checkpoint and request.
# Prints a table last; logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
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
    summary+=("$label: pip install FAILED ($(tail -1 "$OUT/$label-pip.log"))"); return 1
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
  ) || { summary+=("$label: import FAILED ($(tail -1 "$OUT/$label-import.txt"))"); return 1; }
  summary+=("$label: $(basename "$wheel"), import after torch:")
  while read -r line; do summary+=("    $line"); done < <(grep -E "^lib" "$OUT/$label-import.txt")
  [ -f "$W/tiny.json" ] || $py -m sparse3d_engine make-checkpoint --preset tiny --seed 5 --out "$W/tiny" > /dev/null
  $py -m sparse3d_engine info > "$OUT/$label-info.txt" 2>&1
  if $py -m sparse3d_engine run --checkpoint "$W/tiny.json" --device cuda --tokens 3001 --seed 11 \
       --out "$W/out-$label" > "$OUT/$label-run.txt" 2> "$OUT/$label-run.log"; then
    summary+=("  python -m sparse3d_engine run (GPU, tiny, 3,001 tokens): ok")
  else
    summary+=("  python -m sparse3d_engine run: FAILED ($(tail -1 "$OUT/$label-run.log"))")
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
