#!/usr/bin/env bash
# Runs here, not there: assembles .deps/glb, what the GPU machine's `glb` suite carries
# (suites/glb.sh lists it), from this checkout's build and from package registries only:
#   bin/      sparse3d and sparse3d_mesh_gpu_tests from $BIN (build/bin), stripped
#   lib/      the runtime libraries of those the GPU image lacks (meshoptimizer, libwebp,
#             libsharpyuv, libpng), copied from this machine
#   sources/  the six real meshes of tools/glb_judge/sources.py (Debian's glmark2-data and
#             assimp-testmodels; horse and cat need assimp-utils), made with $JUDGE_PYTHON
#   wheels/   the judge's pure-Python packages for the GPU machine's Python 3.12, at the
#             versions tools/glb_judge/requirements.txt was tested with
# Parts: PARTS ("bin sources wheels"); BIN (build/bin); JUDGE_PYTHON (python3: needs the
# judge's requirements installed). Apt packages are installed when missing (root or sudo).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.deps/glb
BIN=${BIN:-build/bin}
PY=${JUDGE_PYTHON:-python3}
PARTS=${PARTS:-bin sources wheels}
SOURCES="bunny horse cat wuson spider regr01"

if [[ " $PARTS " == *" bin "* ]]; then
  mkdir -p "$D/bin" "$D/lib"
  for b in sparse3d sparse3d_mesh_gpu_tests; do
    [ -x "$BIN/$b" ] || { echo "make_glb_deps: $BIN/$b is missing: build first" >&2; exit 1; }
    strip -o "$D/bin/$b" "$BIN/$b"
  done
  ldd "$BIN/sparse3d" | awk '/meshoptimizer|webp|sharpyuv|png/ {print $3}' |
    while read -r lib; do cp -L "$lib" "$D/lib/"; done
  commit="$(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  echo "make_glb_deps: bin/ from $commit; lib/ $(ls "$D/lib" | tr '\n' ' ')"
fi

if [[ " $PARTS " == *" sources "* ]]; then
  missing=()
  [ -d /usr/share/glmark2/models ] || missing+=(glmark2-data)
  [ -d /usr/share/assimp/models ] || missing+=(assimp-testmodels)
  command -v assimp >/dev/null || missing+=(assimp-utils)
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  mkdir -p "$D/sources"
  for n in $SOURCES; do "$PY" tools/glb_judge/sources.py --name "$n" --out "$D/sources"; done
fi

if [[ " $PARTS " == *" wheels "* ]]; then
  rm -rf "$D/wheels"; mkdir -p "$D/wheels"
  python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --no-deps \
    --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$D/wheels" trimesh==5.2.0 pygltflib==1.16.5 dataclasses-json==0.6.7 \
    marshmallow==3.26.2 typing-inspect==0.9.0 mypy_extensions==1.2.0 typing_extensions==4.16.0 \
    Deprecated==1.3.1 wrapt==2.5.2 packaging==26.4
  echo "make_glb_deps: wheels/ $(ls "$D/wheels" | wc -l) files"
fi
du -sh "$D"
