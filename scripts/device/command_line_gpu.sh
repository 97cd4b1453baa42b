#!/usr/bin/env bash
# Device call: the package's command line on the GPU. Builds the Python module and the
# `sparse3d` executable from this tree (build-py, env.sh's build_module), then
#   (1) `python -m sparse3d_engine info`: the GPU line and the CUDA libraries the process
#       loaded (beside the machine's PyTorch, whose CUDA major the import checks);
#   (2) `make-checkpoint --preset tiny`, then `run --tokens 3001 --device cuda` through
#       `python -m sparse3d_engine` and through the executable: the same file, byte for byte;
#   (3) pytest: test_cli.py (against the executable), test_interrupt.py (Ctrl-C inside a GPU
#       request) and test_package.py (the import's CUDA check with the machine's torch).
# Carry: .deps/cudnn_frontend/include, .deps/devsys, .deps/xatlas. Prints a table last; logs
# under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
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
summary+=("python -m sparse3d_engine run (GPU, 3,001 tokens): exit $rc; $(grep -m1 '^\[synthetic\] 3001 tokens' "$OUT/run_python_m.txt" | cut -c1-100)")
if [ -n "${SPARSE3D_CLI:-}" ]; then
  "$SPARSE3D_CLI" "${args[@]}" --out "$W/cli" > "$OUT/run_executable.txt" 2>&1
  if cmp -s "$W/py/synthetic.safetensors" "$W/cli/synthetic.safetensors"; then
    summary+=("  the executable's file: the same bytes")
  else
    summary+=("  the executable's file: DIFFERENT ($(cmp "$W/py/synthetic.safetensors" "$W/cli/synthetic.safetensors" 2>&1 | head -1))")
  fi
fi

SPARSE3D_TEST_DATA=tests/data python3 -m pytest -q -p no:cacheprovider tests/python/test_cli.py \
  tests/python/test_interrupt.py tests/python/test_package.py > "$OUT/pytest.txt" 2>&1
summary+=("pytest test_cli, test_interrupt, test_package (GPU machine): $(tail -n 1 "$OUT/pytest.txt")")
grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -10 | while read -r l; do echo "  $l"; done
echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
