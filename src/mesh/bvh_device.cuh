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

// The closest hit to p; *slot_out (when given) is the hit face's leaf slot, whose corners are
// bvh.corners[9 * slot ...], or -1 with no hit.
__device__ inline ClosestHit closest_on_device(const DeviceBvh::View& bvh, const float p[3],
                                               int32_t* slot_out = nullptr) {
  float best_d2 = FLT_MAX;
  int32_t best_face = -1, best_slot = -1;
  float best_uvw[3] = {0, 0, 0};
  int32_t stack[kBvhStack];
  int top = 0;
  stack[top++] = 0;
  const float reach = prune_reach(p);
  while (top > 0) {
    const Bvh::Node& nd = bvh.nodes[stack[--top]];
    if (out_of_reach(box_distance2(nd.lo, nd.hi, p), best_d2, reach)) continue;
    if (nd.left < 0) {
      for (int32_t s = nd.first; s < nd.first + nd.count; ++s) {
        const float* c = bvh.corners + 9 * int64_t{s};
        float uvw[3];
        const float d2 = closest_on_triangle(p, c, c + 3, c + 6, uvw);
        const int32_t f = bvh.face_of[s];
        if (d2 < best_d2 || (d2 == best_d2 && f < best_face)) {
          best_d2 = d2;
          best_face = f;
          best_slot = s;
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
      if (!out_of_reach(dr, best_d2, reach)) stack[top++] = nd.right;
      if (!out_of_reach(dl, best_d2, reach)) stack[top++] = nd.left;
    } else {
      if (!out_of_reach(dl, best_d2, reach)) stack[top++] = nd.left;
      if (!out_of_reach(dr, best_d2, reach)) stack[top++] = nd.right;
    }
  }
  if (slot_out != nullptr) *slot_out = best_slot;
  ClosestHit h;
  h.distance = sqrtf(best_d2);
  h.face = best_face;
  h.uvw[0] = best_uvw[0], h.uvw[1] = best_uvw[1], h.uvw[2] = best_uvw[2];
  return h;
}

}  // namespace s3d::mesh
