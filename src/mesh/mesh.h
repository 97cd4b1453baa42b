// The mesh layer's vocabulary: an indexed triangle mesh on the host, and the small vector
// helpers every stage of the GLB export uses. Positions are float32 xyz triples, faces int32
// index triples (the layout TRELLIS.2's decoders hand to o_voxel.postprocess.to_glb).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace s3d::mesh {

using Vec3 = std::array<float, 3>;

// Loops over fewer items than this run on one thread: starting a team costs more than they do,
// and far more on a loaded machine. The mesh layer's loops share it (simplify has its own).
constexpr int64_t kParallelMin = 1 << 14;

// A vector whose resize leaves new elements unwritten (default-initialised), for the large
// arrays that threads then fill: std::vector's own resize writes every element on one thread
// first. At 4096^2 texels a six-channel texture is 400 MB and the raster's arrays 200 MB; the
// edge tables of a decoded mesh of 6,000,000 faces are hundreds of MB. Each of those, zeroed on
// one thread before the threads wrote it, was a large share of its stage on the 16-core
// machine. Whoever resizes one writes every element.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using Unfilled = std::vector<T, UninitializedAllocator<T>>;

struct TriMesh {
  std::vector<float> positions;  // 3 per vertex
  std::vector<int32_t> faces;    // 3 per face, counter-clockwise seen from outside

  int64_t num_vertices() const { return static_cast<int64_t>(positions.size() / 3); }
  int64_t num_faces() const { return static_cast<int64_t>(faces.size() / 3); }
  Vec3 vertex(int64_t v) const {
    return {positions[3 * v], positions[3 * v + 1], positions[3 * v + 2]};
  }
};

inline Vec3 operator-(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
inline Vec3 operator+(const Vec3& a, const Vec3& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
inline Vec3 operator*(const Vec3& a, float s) { return {a[0] * s, a[1] * s, a[2] * s}; }
inline float dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline float length(const Vec3& a) { return std::sqrt(dot(a, a)); }

// Throws s3d::Error naming `what` when the mesh is not usable: no faces, a non-finite
// position, an index outside [0, V). Every stage's entry point calls it on its input.
void check_mesh(const TriMesh& m, const char* what);

}  // namespace s3d::mesh
