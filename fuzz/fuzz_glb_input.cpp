// libFuzzer target: the GLB input reader (sparse3d::load_glb_input, docs/FORMATS.md). Only
// sparse3d::Error may come out; an input that reads must hold what the reader promises, or the
// target traps: vertices [V, 3] finite, faces [F, 3] with every index in [0, V), coords [L, 3]
// inside grid_size with no voxel twice, attrs [L, C] finite with the layout inside C, and
// aabb's max above its min on every axis.
#include <cmath>
#include <cstdint>
#include <set>
#include <tuple>

#include "scratch.h"
#include "sparse3d/glb.h"

namespace {

void check_promises(const sparse3d::GlbAsset& a) {
  const size_t V = a.vertices.size() / 3, F = a.faces.size() / 3, L = a.coords.size() / 3;
  if (a.vertices.size() % 3 || a.faces.size() % 3 || a.coords.size() % 3 || V == 0 || F == 0 ||
      L == 0)
    __builtin_trap();
  for (float x : a.vertices)
    if (!std::isfinite(x)) __builtin_trap();
  for (int32_t i : a.faces)
    if (i < 0 || static_cast<size_t>(i) >= V) __builtin_trap();
  if (a.channels < 1 || a.attrs.size() != L * static_cast<size_t>(a.channels)) __builtin_trap();
  for (float x : a.attrs)
    if (!std::isfinite(x)) __builtin_trap();
  std::set<std::tuple<int32_t, int32_t, int32_t>> seen;
  for (size_t v = 0; v < L; ++v) {
    const int32_t* c = &a.coords[3 * v];
    for (int k = 0; k < 3; ++k)
      if (c[k] < 0 || c[k] >= a.grid_size[k]) __builtin_trap();
    if (!seen.insert({c[0], c[1], c[2]}).second) __builtin_trap();
  }
  const sparse3d::AttributeLayout& l = a.layout;
  if (l.base_color < 0 || l.base_color + 3 > a.channels || l.metallic < 0 ||
      l.metallic >= a.channels || l.roughness < 0 || l.roughness >= a.channels || l.alpha < 0 ||
      l.alpha >= a.channels)
    __builtin_trap();
  for (int k = 0; k < 3; ++k)
    if (!(a.aabb[k + 3] > a.aabb[k])) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = s3d::fuzz::write_input("glb_input.safetensors", data, size);
  sparse3d::GlbAsset a;
  try {
    a = sparse3d::load_glb_input(path);
  } catch (const sparse3d::Error&) {
    return 0;
  }
  check_promises(a);
  return 0;
}
