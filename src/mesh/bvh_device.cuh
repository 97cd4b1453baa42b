// The BVH's closest-point traversal as a device function, for kernels that query the tree
// themselves (bvh_cuda.cu's batch query, the remesh's kernels in remesh_cuda.cu): the CPU
// tree's traversal rule (bvh.cpp) and the shared triangle arithmetic (closest_point.h), so the
// answers are the CPU's bit for bit. CUDA sources of the mesh layer only.
#pragma once

#include <cfloat>

#include "mesh/bvh_cuda.h"
#include "mesh/closest_point.h"

namespace s3d::mesh {

constexpr int kBvhStack = 96;  // the build bounds the depth at 48 + 31 levels

__device__ inline ClosestHit closest_on_device(const DeviceBvh::View& bvh, const float p[3]) {
  float best_d2 = FLT_MAX;
  int32_t best_face = -1;
  float best_uvw[3] = {0, 0, 0};
  int32_t stack[kBvhStack];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Bvh::Node& nd = bvh.nodes[stack[--top]];
    if (box_distance2(nd.lo, nd.hi, p) > best_d2) continue;
    if (nd.left < 0) {
      for (int32_t s = nd.first; s < nd.first + nd.count; ++s) {
        const float* c = bvh.corners + 9 * int64_t{s};
        float uvw[3];
        const float d2 = closest_on_triangle(p, c, c + 3, c + 6, uvw);
        const int32_t f = bvh.face_of[s];
        if (d2 < best_d2 || (d2 == best_d2 && f < best_face)) {
          best_d2 = d2;
          best_face = f;
          best_uvw[0] = uvw[0], best_uvw[1] = uvw[1], best_uvw[2] = uvw[2];
        }
      }
      continue;
    }
    const Bvh::Node& l = bvh.nodes[nd.left];
    const Bvh::Node& r = bvh.nodes[nd.right];
    const float dl = box_distance2(l.lo, l.hi, p), dr = box_distance2(r.lo, r.hi, p);
    if (top + 2 > kBvhStack) break;  // unreachable for trees this build makes
    if (dl <= dr) {
      if (dr <= best_d2) stack[top++] = nd.right;
      if (dl <= best_d2) stack[top++] = nd.left;
    } else {
      if (dl <= best_d2) stack[top++] = nd.left;
      if (dr <= best_d2) stack[top++] = nd.right;
    }
  }
  ClosestHit h;
  h.distance = sqrtf(best_d2);
  h.face = best_face;
  h.uvw[0] = best_uvw[0], h.uvw[1] = best_uvw[1], h.uvw[2] = best_uvw[2];
  return h;
}

}  // namespace s3d::mesh
