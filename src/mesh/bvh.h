// A bounding-volume hierarchy over a triangle mesh's faces, for closest-point queries: the
// unsigned distance from a point to the surface, the face it is closest to and the
// barycentric coordinates of the closest point in that face. What cuBVH's
// unsigned_distance(points, return_uvw=True) gives TRELLIS.2's to_glb (the remesh's distance
// field, and each texel's projection onto the decoded surface).
//
// CPU: a binary SAH-binned tree built once, queried from many threads at once (OpenMP over
// the query points). Ties between faces at equal distance resolve to the lower face index, so
// results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mesh/mesh.h"

namespace s3d::mesh {

struct ClosestHit {
  float distance = 0;  // Euclidean, >= 0
  int32_t face = -1;   // index into the mesh's faces
  float uvw[3] = {0, 0, 0};  // barycentric weights of the face's three vertices, sum 1
};

class DeviceBvh;

// Where a Bvh's tree is built: on the host (binned SAH; the CPU's queries, and the device's
// after use_device()), or on the device alone (a linear BVH, bvh_cuda.h: for a process whose
// queries all run on the GPU, it saves the host build and the copy).
enum class BvhBuild { host, device };

class Bvh {
 public:
  // Keeps a copy of the mesh's positions and faces. Throws s3d::Error on an unusable mesh, and
  // for BvhBuild::device when no CUDA device is usable or the device build fails (the caller
  // counts that as a fallback and builds on the host).
  explicit Bvh(const TriMesh& mesh, BvhBuild build = BvhBuild::host);
  // The host tree, where the Bvh was built on the device and a query must now run on the CPU
  // (a fallback's); a no-op when it is there. After this, CPU queries are allowed.
  void build_host_tree();
  bool has_host_tree() const { return !nodes_.empty(); }

  // On the CPU: needs the host tree (has_host_tree(); else s3d::Error).
  ClosestHit closest(const Vec3& p) const;
  // out[i] for points[3i..3i+2], i < n (host arrays); parallel over the points, or on the GPU
  // after use_device(), with the same bits either way.
  void closest_many(const float* points, int64_t n, ClosestHit* out) const;
  // From now on closest_many runs on the current CUDA device (bvh_cuda.h), the host tree
  // copied there. Throws s3d::Error when no CUDA device is usable; the caller counts that as a
  // fallback to the CPU. A no-op for a tree built on the device.
  void use_device();
  bool on_device() const { return device_ != nullptr; }
  // The device copy after use_device(), else null.
  const DeviceBvh* device() const { return device_.get(); }

  const TriMesh& mesh() const { return mesh_; }
  // The tree, for its device copy (bvh_cuda.h): nodes_[0] is the root; a leaf's faces are
  // order_[first, first + count).
  const std::vector<int32_t>& order() const { return order_; }

  struct Node {
    float lo[3], hi[3];
    int32_t left = -1;   // child index, or -1 for a leaf
    int32_t right = -1;
    int32_t first = 0;   // leaf: range [first, first + count) of order_
    int32_t count = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  // The faces' corners in leaf order (9 floats each), for the device copy.
  std::vector<float> leaf_corners() const;

 private:
  void check_host_tree() const;
  TriMesh mesh_;
  std::shared_ptr<const class DeviceBvh> device_;
  std::vector<Node> nodes_;
  std::vector<int32_t> order_;  // face indices, leaf ranges contiguous
};

// The closest point on triangle (a, b, c) to p, as barycentric weights (sum 1); returns the
// squared distance. The reference every BVH query is tested against (brute force over faces).
float closest_point_on_triangle(const Vec3& p, const Vec3& a, const Vec3& b, const Vec3& c,
                                float uvw[3]);

}  // namespace s3d::mesh
