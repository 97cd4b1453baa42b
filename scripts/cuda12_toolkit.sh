#!/usr/bin/env bash
# Assembles a CUDA 12.4 toolkit (the CUDA of TRELLIS.2's PyTorch 2.6 stack) in .deps/cuda12/
# from package registries, for the CUDA 12 wheel (scripts/build_wheel.sh with CUDA=12):
#   - headers and libraries from NVIDIA's PyPI wheels (nvidia-*-cu12, the ones PyTorch 2.6
#     cu124 installs: cudart, CCCL, cuBLAS 12.4.5.8, NVRTC, cuDNN 9.1.0.70; CCCL as 12.4.127.post1:
#     12.4.127 itself is yanked, "broken release", without libcu++, which CUB needs) and ptxas/libdevice
#     from nvidia-cuda-nvcc-cu12;
#   - the compiler driver itself (nvcc, cicc, cudafe++, fatbinary, nvlink), which no PyPI wheel
#     carries, from Debian's nvidia-cuda-toolkit 12.4.131 package (trixie, non-free), unpacked
#     (not installed) and checked against the SHA256 in Debian's package index.
# The result is a folder with bin/ (nvcc and its tools, an nvcc.profile of our own),
# nvvm/, include/ and lib64/ laid out as an NVIDIA toolkit is, for CUDAToolkit_ROOT.
# Prints the folder last. Idempotent: an existing complete folder is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.deps/cuda12
# (A folder without libcu++'s <cuda/__cccl_config> came from the yanked cccl 12.4.127: made anew.)
[ -x "$root/bin/nvcc" ] && [ -f "$root/lib64/libcudnn.so" ] && [ -f "$root/include/cuda/__cccl_config" ] &&
  { echo "$root"; exit 0; }

DEBIAN=http://deb.debian.org/debian
DEB_VERSION="12.4.131~12.4.1-2"
WHEELS=("nvidia-cuda-nvcc-cu12==12.4.131" "nvidia-cuda-runtime-cu12==12.4.127"
        "nvidia-cuda-cccl-cu12==12.4.127.post1" "nvidia-cublas-cu12==12.4.5.8"
        "nvidia-cuda-nvrtc-cu12==12.4.127" "nvidia-cudnn-cu12==9.1.0.70")
work=$(mktemp -d "${TMPDIR:-/tmp}/cuda12.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "cuda12_toolkit: NVIDIA's CUDA 12.4 wheels from PyPI" >&2
python3 -m pip install -q --no-deps --disable-pip-version-check --target "$work/site" "${WHEELS[@]}"

echo "cuda12_toolkit: nvcc $DEB_VERSION from Debian (trixie non-free)" >&2
curl -fsS -o "$work/Packages.xz" "$DEBIAN/dists/trixie/non-free/binary-amd64/Packages.xz"
xz -dc "$work/Packages.xz" > "$work/Packages"
for pkg in nvidia-cuda-toolkit libnvvm4; do
  entry=$(awk -v p="Package: $pkg" -v v="Version: $DEB_VERSION" \
    'BEGIN{RS=""} index($0, p "\n") == 1 && index($0, v "\n") {print; exit}' "$work/Packages")
  file=$(sed -n 's/^Filename: //p' <<<"$entry")
  sum=$(sed -n 's/^SHA256: //p' <<<"$entry")
  [ -n "$file" ] && [ -n "$sum" ] || { echo "cuda12_toolkit: $pkg $DEB_VERSION is not in Debian's index" >&2; exit 1; }
  curl -fsS -o "$work/$pkg.deb" "$DEBIAN/$file"
  echo "$sum  $work/$pkg.deb" | sha256sum -c --quiet - || { echo "cuda12_toolkit: $pkg: checksum mismatch" >&2; exit 1; }
  dpkg-deb -x "$work/$pkg.deb" "$work/deb"
done

rm -rf "$root.tmp" && mkdir -p "$root.tmp"/{bin,include,lib64,nvvm/bin,nvvm/lib64}
t=$root.tmp n=$work/site/nvidia d=$work/deb
cp "$d"/usr/lib/nvidia-cuda-toolkit/bin/{nvcc,cicc} "$t/bin/"
cp -r "$d"/usr/lib/nvidia-cuda-toolkit/bin/crt "$t/bin/"
cp "$d"/usr/bin/{cudafe++,fatbinary,nvlink,bin2c,nvprune,cuobjdump} "$t/bin/"
cp "$n/cuda_nvcc/bin/ptxas" "$t/bin/"
mv "$t/bin/cicc" "$t/nvvm/bin/"
cp -r "$n/cuda_nvcc/nvvm/libdevice" "$t/nvvm/"
cp "$n"/cuda_nvcc/nvvm/lib64/* "$t/nvvm/lib64/"
# nvcc reads the profile beside it: our paths, nothing of /usr/lib/nvidia-cuda-toolkit.
cat > "$t/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
for pkg in cuda_runtime cuda_nvcc cuda_cccl cublas cuda_nvrtc cudnn; do
  cp -r "$n/$pkg/include/." "$t/include/"
  [ -d "$n/$pkg/lib" ] && find "$n/$pkg/lib" -maxdepth 1 -name '*.so*' -exec cp {} "$t/lib64/" \;
done
# The unversioned names a link step asks for.
(cd "$t/lib64" && for lib in libcudart.so.12 libcublas.so.12 libcublasLt.so.12 libnvrtc.so.12 libcudnn.so.9; do
   ln -sf "$lib" "${lib%%.so*}.so"; done)
"$t/bin/nvcc" --version | tail -2 >&2
rm -rf "$root" && mv "$t" "$root"
echo "$root"
