// The closest-point BVH (bvh.h). Built top-down by binned SAH over face centroids (16 bins per
// axis, leaves of at most 4 faces); queried depth-first, nearer child first, pruning a node when
// the squared distance to its box is not below the best found so far.
#include "mesh/bvh.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/cuda_util.h"
#include "mesh/bvh_cuda.h"
#include "mesh/closest_point.h"

namespace s3d::mesh {
namespace {

constexpr int kBins = 16;
constexpr int kLeafFaces = 4;
constexpr int kSahDepth = 48;  // then median splits: depth <= 48 + 31 < the query's stack

struct Box {
  float lo[3] = {FLT_MAX, FLT_MAX, FLT_MAX};
  float hi[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
  void grow(const float p[3]) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], p[k]);
      hi[k] = std::max(hi[k], p[k]);
    }
  }
  void grow(const Box& b) {
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], b.lo[k]);
      hi[k] = std::max(hi[k], b.hi[k]);
    }
  }
  float area() const {
    if (lo[0] > hi[0]) return 0;
    const float dx = hi[0] - lo[0], dy = hi[1] - lo[1], dz = hi[2] - lo[2];
    return dx * dy + dy * dz + dz * dx;
  }
};

// Builds nodes over order[first, first + count); returns the node's index.
struct Builder {
  const std::vector<Box>& boxes;
  const std::vector<float>& centroids;  // 3 per face
  std::vector<int32_t>& order;
  std::vector<Bvh::Node>& nodes;

  int32_t build(int32_t first, int32_t count, int depth) {
    Box bounds, cbounds;
    for (int32_t i = first; i < first + count; ++i) {
      bounds.grow(boxes[order[i]]);
      cbounds.grow(&centroids[3 * order[i]]);
    }
    const int32_t index = static_cast<int32_t>(nodes.size());
    nodes.emplace_back();
    std::memcpy(nodes[index].lo, bounds.lo, sizeof bounds.lo);
    std::memcpy(nodes[index].hi, bounds.hi, sizeof bounds.hi);
    int axis = -1;
    int32_t split = 0;
    if (count > kLeafFaces) choose_split(first, count, cbounds, depth, axis, split);
    if (axis < 0) {
      nodes[index].first = first;
      nodes[index].count = count;
      return index;
    }
    const int32_t left = build(first, split - first, depth + 1);
    const int32_t right = build(split, first + count - split, depth + 1);
    nodes[index].left = left;
    nodes[index].right = right;
    return index;
  }

  // Partitions order[first, first + count) by the cheapest binned SAH split; axis stays -1
  // when all centroids coincide. Falls back to a median split along the longest axis when the
  // binned split would leave one side empty, and below kSahDepth levels, so that the tree is
  // at most kSahDepth + log2(F) deep whatever the geometry (the query's stack is fixed).
  void choose_split(int32_t first, int32_t count, const Box& cb, int depth, int& axis,
                    int32_t& split) {
    float best = FLT_MAX;
    int best_axis = -1, best_bin = 0;
    for (int k = 0; k < 3 && depth < kSahDepth; ++k) {
      const float extent = cb.hi[k] - cb.lo[k];
      if (!(extent > 0)) continue;
      Box bin_box[kBins];
      int32_t bin_count[kBins] = {};
      for (int32_t i = first; i < first + count; ++i) {
        const int32_t f = order[i];
        int b = static_cast<int>(kBins * (centroids[3 * f + k] - cb.lo[k]) / extent);
        b = std::clamp(b, 0, kBins - 1);
        bin_box[b].grow(boxes[f]);
        ++bin_count[b];
      }
      float right_area[kBins];
      int32_t right_count[kBins];
      Box acc;
      int32_t n = 0;
      for (int b = kBins - 1; b > 0; --b) {
        acc.grow(bin_box[b]);
        n += bin_count[b];
        right_area[b] = acc.area();
        right_count[b] = n;
      }
      Box lacc;
      int32_t ln = 0;
      for (int b = 0; b < kBins - 1; ++b) {
        lacc.grow(bin_box[b]);
        ln += bin_count[b];
        if (ln == 0 || right_count[b + 1] == 0) continue;
        const float cost = lacc.area() * ln + right_area[b + 1] * right_count[b + 1];
        if (cost < best) {
          best = cost;
          best_axis = k;
          best_bin = b;
        }
      }
    }
    if (best_axis < 0) {  // every centroid in one place, or one bin: median split if possible
      int k = 0;
      for (int j = 1; j < 3; ++j)
        if (cb.hi[j] - cb.lo[j] > cb.hi[k] - cb.lo[k]) k = j;
      if (!(cb.hi[k] - cb.lo[k] > 0)) return;
      const int32_t mid = first + count / 2;
      std::nth_element(order.begin() + first, order.begin() + mid, order.begin() + first + count,
                       [&](int32_t a, int32_t b) {
                         return centroids[3 * a + k] < centroids[3 * b + k] ||
                                (centroids[3 * a + k] == centroids[3 * b + k] && a < b);
                       });
      axis = k;
      split = mid;
      return;
    }
    const float extent = cb.hi[best_axis] - cb.lo[best_axis];
    const auto mid = std::partition(
        order.begin() + first, order.begin() + first + count, [&](int32_t f) {
          int b = static_cast<int>(kBins * (centroids[3 * f + best_axis] - cb.lo[best_axis]) /
                                   extent);
          return std::clamp(b, 0, kBins - 1) <= best_bin;
        });
    axis = best_axis;
    split = static_cast<int32_t>(mid - order.begin());
  }
};

}  // namespace

float closest_point_on_triangle(const Vec3& p, const Vec3& a, const Vec3& b, const Vec3& c,
                                float uvw[3]) {
  return closest_on_triangle(p.data(), a.data(), b.data(), c.data(), uvw);
}

Bvh::Bvh(const TriMesh& mesh) : mesh_(mesh) {
  check_mesh(mesh_, "BVH mesh");
  const int64_t F = mesh_.num_faces();
  S3D_CHECK(F < std::numeric_limits<int32_t>::max() / 2, "BVH mesh: ", F,
            " faces is more than a BVH of 32-bit indices holds");
  std::vector<Box> boxes(F);
  std::vector<float> centroids(3 * F);
#pragma omp parallel for schedule(static)
  for (int64_t f = 0; f < F; ++f) {
    Box b;
    for (int k = 0; k < 3; ++k) b.grow(&mesh_.positions[3 * mesh_.faces[3 * f + k]]);
    boxes[f] = b;
    for (int k = 0; k < 3; ++k) centroids[3 * f + k] = 0.5f * (b.lo[k] + b.hi[k]);
  }
  order_.resize(F);
  for (int64_t f = 0; f < F; ++f) order_[f] = static_cast<int32_t>(f);
  nodes_.reserve(2 * F / kLeafFaces + 1);
  Builder{boxes, centroids, order_, nodes_}.build(0, static_cast<int32_t>(F), 0);
}

ClosestHit Bvh::closest(const Vec3& p) const {
  ClosestHit best;
  float best_d2 = FLT_MAX;
  int32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& n = nodes_[stack[--top]];
    if (box_distance2(n.lo, n.hi, p.data()) > best_d2) continue;
    if (n.left < 0) {
      for (int32_t i = n.first; i < n.first + n.count; ++i) {
        const int32_t f = order_[i];
        float uvw[3];
        const float d2 = closest_point_on_triangle(p, mesh_.vertex(mesh_.faces[3 * f]),
                                                   mesh_.vertex(mesh_.faces[3 * f + 1]),
                                                   mesh_.vertex(mesh_.faces[3 * f + 2]), uvw);
        // Ties go to the lower face index: the answer does not depend on the traversal.
        if (d2 < best_d2 || (d2 == best_d2 && f < best.face)) {
          best_d2 = d2;
          best.face = f;
          std::memcpy(best.uvw, uvw, sizeof uvw);
        }
      }
      continue;
    }
    const Node& l = nodes_[n.left];
    const Node& r = nodes_[n.right];
    const float dl = box_distance2(l.lo, l.hi, p.data());
    const float dr = box_distance2(r.lo, r.hi, p.data());
    // Push the farther child first so the nearer one is searched first. The stack holds at
    // most one entry per level plus one, and the build bounds the depth (kSahDepth).
    if (dl <= dr) {
      if (dr <= best_d2) stack[top++] = n.right;
      if (dl <= best_d2) stack[top++] = n.left;
    } else {
      if (dl <= best_d2) stack[top++] = n.left;
      if (dr <= best_d2) stack[top++] = n.right;
    }
  }
  best.distance = std::sqrt(best_d2);
  return best;
}

void Bvh::use_device() {
  S3D_CHECK(cuda_available(), "BVH: no usable CUDA device");
  device_ = std::make_shared<const DeviceBvh>(*this);
}

void Bvh::closest_many(const float* points, int64_t n, ClosestHit* out) const {
  if (device_ && n > 0) {
    device_->closest_many_host(points, n, out);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1024)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = closest({points[3 * i], points[3 * i + 1], points[3 * i + 2]});
  }
}

}  // namespace s3d::mesh
