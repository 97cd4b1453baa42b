# Sourced by the device scripts: library paths on the H200 machine (cuDNN lives only in
# python3's site-packages there) and the output folder.
export PATH="/usr/local/cuda/bin:$PATH"
CUDNN_SITE=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || true)
[ -n "$CUDNN_SITE" ] || CUDNN_SITE=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
export LD_LIBRARY_PATH="$CUDNN_SITE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BIN=${BIN:-build/bin}
