// The BVH on the device and its closest-point queries on the GPU. Two ways to get one:
// - a copy of the CPU's tree (bvh.h);
// - a tree built on the device from the mesh alone: a linear BVH (faces sorted by the Morton
//   code of their centroids, four consecutive faces to a leaf, the hierarchy over the leaves'
//   codes built in parallel, one node per split, as in Karras's "Maximizing parallelism in the
//   construction of BVHs, octrees and k-d trees", 2012; boxes refitted from the leaves up).
//   Milliseconds where the CPU's binned-SAH build of a decoded mesh takes most of a second;
//   its boxes are looser, so a query visits more of them.
// Either way the traversal rule and the triangle arithmetic are the CPU's (bvh_device.cuh,
// closest_point.h), and ties between faces go to the lower face index, so every answer is the
// CPU tree's bit for bit whatever the tree (tests/gpu/test_mesh_gpu.cpp checks both).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "mesh/bvh.h"

namespace s3d::mesh {

class DeviceBvh {
 public:
  // Uploads the tree and the faces' corners in leaf order (on the current stream).
  explicit DeviceBvh(const Bvh& bvh);
  // Builds a linear BVH of the mesh on the device (the mesh is checked by the caller).
  explicit DeviceBvh(const TriMesh& mesh);
  // points: 3n floats on the device; out: n hits on the device. Asynchronous on the current
  // stream; n may be 0.
  void closest_many(const float* points, int64_t n, ClosestHit* out) const;
  // The same for host arrays: the points go up and the hits come back in chunks, synchronously.
  void closest_many_host(const float* points, int64_t n, ClosestHit* out) const;
  int64_t num_faces() const { return face_of_.numel(); }

  // The device arrays, for kernels that query the tree themselves (bvh_device.cuh).
  struct View {
    const Bvh::Node* nodes;
    const float* corners;
    const int32_t* face_of;
  };
  View view() const;

 private:
  Tensor nodes_;     // Bvh::Node records, as bytes
  Tensor corners_;   // 9 floats per face, in the tree's leaf order
  Tensor face_of_;   // i32: the face index of each leaf slot
};

}  // namespace s3d::mesh
