// The BVH's device copy and its closest-point queries on the GPU: the same tree as the CPU's
// (bvh.h), the same traversal rule and the same triangle arithmetic (closest_point.h), so the
// answers are the CPU's bit for bit (tests/gpu/test_mesh_gpu.cpp checks it).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "mesh/bvh.h"

namespace s3d::mesh {

class DeviceBvh {
 public:
  // Uploads the tree and the faces' corners in leaf order (on the current stream).
  explicit DeviceBvh(const Bvh& bvh);
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
