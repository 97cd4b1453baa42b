#!/usr/bin/env bash
# The main job: set-up, build, then a full denoise. On a GPU: the released-size
# trellis2-shape-1024 model (synthetic weights), the released sampler (12 Euler steps, CFG 7.5
# on t in [0.6, 1]) on the default path, for the smallest and largest benchmark payloads
# (3,664 and 30,227 tokens). Without a GPU: the CPU backend on the tiny preset and two small
# payloads. Then a GLB export of a procedural asset (both machines).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/sparse3d
out=${OUT_DIR:-out}
$bin info
if nvidia-smi -L >/dev/null 2>&1; then
  [ -f "$out/ckpt/shape1024.json" ] ||
    $bin make-checkpoint --preset trellis2-shape-1024 --seed 1 --out "$out/ckpt/shape1024"
  [ -f "$out/payloads/manifest.json" ] || $bin make-payloads --set benchmark --out "$out/payloads"
  first=$(python3 -c "import json;a=json.load(open('$out/payloads/manifest.json'))['assets'];print(a[0]['name'])")
  last=$(python3 -c "import json;a=[x for x in json.load(open('$out/payloads/manifest.json'))['assets'] if x['set']=='default'];print(a[-1]['name'])")
  $bin run --checkpoint "$out/ckpt/shape1024.json" --manifest "$out/payloads/manifest.json" \
    --asset "$first" --asset "$last" --out "$out/latents" "$@"
else
  echo "no GPU found: running the CPU backend on the tiny preset"
  $bin make-checkpoint --preset tiny --seed 1 --out "$out/ckpt/tiny"
  $bin make-payloads --set small --out "$out/payloads-small"
  $bin run --checkpoint "$out/ckpt/tiny.json" --manifest "$out/payloads-small/manifest.json" \
    --out "$out/latents-tiny" "$@"
fi
# The GLB export (docs/EXPORT.md): a procedural textured torus made decoder-like at 256, then
# TRELLIS.2's app settings scaled down (remesh, band 1, no pull-back; 50,000 faces, 1024²).
$bin make-glb-input --procedural torus --resolution 256 --out "$out/glb/torus256.safetensors"
$bin export-glb --input "$out/glb/torus256.safetensors" --out "$out/glb/torus256.glb" \
  --decimation-target 50000 --texture-size 1024 --remesh --remesh-project 0
