// Simplification to a face budget (simplify.h) with meshoptimizer's quadric edge collapse.
//
// meshopt_simplify stops at the first of the index target and its error bound (relative to
// the mesh's extent), and it will not collapse across complex topology. TRELLIS.2's budget is
// a hard one, so the bound starts tight (a good surface when the budget is easy) and is
// relaxed pass after pass while the result is above the target; should the collapse stall
// with the bound already at the mesh's whole extent, the sloppy (vertex clustering)
// simplifier, which ignores topology, finishes the job, and should clustering merge every
// face away, the largest faces are kept. Each pass starts from the last one's output, so the
// bound holds per pass, not for the sum of the passes (the first pass does nearly all the
// work at TRELLIS.2's budgets).
#include "mesh/simplify.h"

#include <meshoptimizer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "mesh/clean.h"

namespace s3d::mesh {
namespace {

constexpr float kFirstError = 1e-2f;  // relative to the mesh's extent
constexpr float kMaxError = 1.0f;     // the whole extent: the bound no longer limits anything

// The squared length of the face's edge cross product (four times its area squared).
double area2(const unsigned* face, const std::vector<float>& p) {
  double e0[3], e1[3];
  for (int k = 0; k < 3; ++k) {
    e0[k] = double(p[3 * size_t(face[1]) + k]) - p[3 * size_t(face[0]) + k];
    e1[k] = double(p[3 * size_t(face[2]) + k]) - p[3 * size_t(face[0]) + k];
  }
  const double cx = e0[1] * e1[2] - e0[2] * e1[1], cy = e0[2] * e1[0] - e0[0] * e1[2],
               cz = e0[0] * e1[1] - e0[1] * e1[0];
  return cx * cx + cy * cy + cz * cz;
}

// The `target` indices (a multiple of 3) of the largest faces among indices[0, n), in their
// order; ties go to the earlier face.
size_t keep_largest(std::vector<unsigned>& indices, size_t n, size_t target,
                    const std::vector<float>& p) {
  const size_t faces = n / 3, keep = std::min(faces, target / 3);
  std::vector<std::pair<double, size_t>> order(faces);
  for (size_t f = 0; f < faces; ++f) order[f] = {-area2(&indices[3 * f], p), f};
  std::nth_element(order.begin(), order.begin() + keep, order.end());
  std::vector<size_t> kept(keep);
  for (size_t i = 0; i < keep; ++i) kept[i] = order[i].second;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i < keep; ++i) {
    for (int k = 0; k < 3; ++k) indices[3 * i + k] = indices[3 * kept[i] + k];
  }
  return 3 * keep;
}

}  // namespace

void simplify(TriMesh& m, int64_t target_faces) {
  S3D_CHECK(target_faces >= 1, "simplify: target_faces must be at least 1 (got ", target_faces,
            ")");
  check_mesh(m, "simplify");
  if (m.num_faces() <= target_faces) return;
  const size_t V = static_cast<size_t>(m.num_vertices());
  const size_t target = 3 * static_cast<size_t>(target_faces);
  std::vector<unsigned> indices(m.faces.begin(), m.faces.end());
  std::vector<unsigned> out(indices.size());
  size_t n = indices.size();
  float bound = kFirstError;
  for (;;) {
    const size_t before = n;
    n = meshopt_simplify(out.data(), indices.data(), n, m.positions.data(), V, 3 * sizeof(float),
                         target, bound, 0, nullptr);
    indices.swap(out);
    if (n <= target) break;
    // A pass at the largest bound collapsed all it could: the topology blocks the rest.
    if (bound >= kMaxError) break;
    // Relax fast when the bound held the pass back to little, gently when it was progressing,
    // so that the final bound stays near the smallest one that reaches the target.
    const bool slow = before - n < before / 100;
    bound = std::min(kMaxError, bound * (slow ? 10.f : 2.f));
  }
  if (n > target) {
    // Clustering works on positions alone, so it also reduces what edge collapse may not
    // touch (unwelded faces, non-manifold fans), at the price of the surface's detail.
    const size_t sloppy =
        meshopt_simplifySloppy(out.data(), indices.data(), n, m.positions.data(), V,
                               3 * sizeof(float), target, std::numeric_limits<float>::max(),
                               nullptr);
    if (sloppy > 0) {
      indices.swap(out);
      n = sloppy;
    } else {
      // Clustering merged every face away (small isolated features): keep the largest.
      n = keep_largest(indices, n, target, m.positions);
    }
  }
  S3D_CHECK(n > 0 && n <= target, "simplify: could not reduce the mesh to ", target_faces,
            " faces (", n / 3, " left)");
  m.faces.assign(indices.begin(), indices.begin() + n);
  // Collapses can leave slivers of (near) zero area; this also drops the unused vertices.
  remove_degenerate_faces(m);
  S3D_CHECK(m.num_faces() > 0, "simplify: only degenerate faces were left at a budget of ",
            target_faces, " faces");
}

}  // namespace s3d::mesh
