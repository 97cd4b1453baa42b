#!/usr/bin/env bash
# Checks the installed package the way a user meets it: installs an existing build
# ($BUILD_DIR, default build) into a temporary prefix, checks what is there (the CLI, the
# public headers and nothing of src/, the CMake package, no path back into this tree),
# configures and builds examples/minimal from a copy outside the tree with
# find_package(sparse3d) on that prefix alone, makes the tiny checkpoint with the installed
# CLI and runs the example on it (the CPU backend where there is no GPU).
#
# Env: BUILD_DIR (default build), KEEP=1 keeps the temporary folder (its path is printed).
# Exit status: non-zero on any failure, with the step that failed on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=${BUILD_DIR:-build}
tree=$PWD
[ -f "$BUILD_DIR/cmake_install.cmake" ] || { echo "check_install: no build in $BUILD_DIR" >&2; exit 1; }
build=$(cd "$BUILD_DIR" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/sparse3d-install.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "check_install: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
step=""
trap 'echo "check_install: FAILED: $step" >&2' ERR
prefix=$work/prefix

step="cmake --install $BUILD_DIR --prefix $prefix"
cmake --install "$BUILD_DIR" --prefix "$prefix" >"$work/install.log"

step="the installed files"
[ -x "$prefix/bin/sparse3d" ]
for h in include/sparse3d/*.h; do cmp -s "$h" "$prefix/$h"; done
extra=$(cd "$prefix/include" && find . -type f ! -path './sparse3d/*.h')
[ -z "$extra" ] || { echo "not public headers, installed: $extra" >&2; false; }
config=$(find "$prefix" -name sparse3dConfig.cmake)
[ -n "$config" ]
[ -f "$(dirname "$config")/sparse3dConfigVersion.cmake" ]
# The exported targets must not point into the source or build tree.
if grep -rl -e "$tree/src" -e "$build" "$(dirname "$config")" >&2; then
  echo "the package above points into $tree" >&2; false
fi

step="configure examples/minimal against the installed package"
cp -r examples/minimal "$work/minimal"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$work/minimal" -B "$work/minimal-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/configure.log"
found=$(sed -n 's/^sparse3d_DIR:PATH=//p' "$work/minimal-build/CMakeCache.txt")
[ "$found" = "$(dirname "$config")" ] || { echo "found sparse3d in $found, not in $prefix" >&2; false; }

step="build examples/minimal"
if ! compgen -G "$prefix/lib*/libsparse3d_engine.a" >/dev/null; then
  # The public API is implemented in src/engine: without its sources there is no engine
  # library, and only the example's compile step can be checked.
  obj=main.cpp.o; [ ${#gen[@]} -gt 0 ] && obj=CMakeFiles/minimal.dir/main.cpp.o
  cmake --build "$work/minimal-build" --target "$obj"
  step="examples/minimal compiles against the installed headers, but cannot link: no engine library was installed (src/engine has no sources)"
  false
fi
cmake --build "$work/minimal-build"

step="sparse3d make-checkpoint --preset tiny (the installed CLI)"
"$prefix/bin/sparse3d" make-checkpoint --preset tiny --seed 1 --out "$work/ckpt/tiny" >/dev/null

step="run examples/minimal on the tiny checkpoint"
"$work/minimal-build/minimal" "$work/ckpt/tiny.json"
echo "check_install: ok (installed, found, built, ran)"
