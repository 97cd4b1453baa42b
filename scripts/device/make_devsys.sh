#!/usr/bin/env bash
# Run here, not on the device: unpacks Debian's packages of the GLB export's libraries
# (meshoptimizer, libwebp, libpng, zlib: headers, CMake and pkg-config files, shared objects;
# Eigen's headers and CMake files, for the conformal charts) and the command line's parser
# CLI11 (headers and CMake files), which the module links into .deps/devsys, which the device
# scripts carry and env.sh puts on the build and library paths there (the GPU image has none
# of them). About 9 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libmeshoptimizer-dev libmeshoptimizer2d libwebp-dev libwebp7 \
   libwebpdemux2 libwebpmux3 libpng-dev libpng16-16 zlib1g-dev libcli11-dev libeigen3-dev >/dev/null)
rm -rf .deps/devsys
mkdir -p .deps/devsys
for f in "$tmp"/*.deb; do dpkg -x "$f" .deps/devsys; done
# zlib: the device's own shared library (a static libz.a cannot go into the module).
rm -f .deps/devsys/usr/lib/x86_64-linux-gnu/libz.a
ln -sf /lib/x86_64-linux-gnu/libz.so.1 .deps/devsys/usr/lib/x86_64-linux-gnu/libz.so
rm -rf "$tmp"
du -sh .deps/devsys
