// LSCM (conformal.h). Each weighted triangle, laid out in its own plane as complex points
// z0, z1, z2 (counter-clockwise about its normal), asks that the map's derivative with respect
// to conj(z) vanish: for the linear map with vertex images w_j, that derivative is a constant
// times sum_j (z_{j+2} - z_{j+1}) w_j / area, and its squared size times the area is the
// triangle's share of the energy. Written in real terms that is two rows per triangle over the
// vertices' u and v; with two vertices pinned, the normal equations are symmetric positive
// definite for a connected chart, solved by a sparse Cholesky factorization.
#include "mesh/conformal.h"

#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <cmath>

namespace s3d::mesh {

namespace {

using D3 = std::array<double, 3>;

D3 minus(const D3& a, const D3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double dot(const D3& a, const D3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
D3 cross(const D3& a, const D3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

// The two vertices pinned: the lowest and the highest along the bounding box's longest side
// (ties to the lower index).
std::array<int32_t, 2> pins(const std::vector<D3>& p) {
  D3 lo = p[0], hi = p[0];
  for (const D3& q : p)
    for (int k = 0; k < 3; ++k) lo[k] = std::min(lo[k], q[k]), hi[k] = std::max(hi[k], q[k]);
  int axis = 0;
  for (int k = 1; k < 3; ++k)
    if (hi[k] - lo[k] > hi[axis] - lo[axis]) axis = k;
  int32_t a = 0, b = 0;
  for (size_t v = 1; v < p.size(); ++v) {
    if (p[v][axis] < p[a][axis]) a = static_cast<int32_t>(v);
    if (p[v][axis] > p[b][axis]) b = static_cast<int32_t>(v);
  }
  return {a, b};
}

// The normal equations' entries (over the free unknowns: u and v of vertex v at 2 index[v]
// and 2 index[v] + 1) and right-hand side (the pinned vertices' share moved over), summed over
// the weighted faces.
template <class PinOf>
void normal_equations(const std::vector<D3>& positions, const std::vector<int32_t>& corners,
                      const std::vector<char>& weighted, const std::vector<int32_t>& index,
                      const double (&pinned)[2][2], PinOf pin_of,
                      std::vector<Eigen::Triplet<double>>& entries, Eigen::VectorXd& rhs) {
  const size_t F = corners.size() / 3;
  entries.reserve(F * 36);
  for (size_t f = 0; f < F; ++f) {
    if (!weighted[f]) continue;
    const int32_t* t = &corners[3 * f];
    const D3 e1 = minus(positions[t[1]], positions[t[0]]);
    const D3 e2 = minus(positions[t[2]], positions[t[0]]);
    const D3 normal = cross(e1, e2);
    const double twice_area = std::sqrt(dot(normal, normal));
    const double l1 = std::sqrt(dot(e1, e1));
    if (!(twice_area > 0) || !(l1 > 0)) continue;
    // The triangle in its own plane: z0 = 0, z1 on the x axis, z2 above it.
    const double x2 = dot(e2, e1) / l1, y2 = twice_area / l1;
    const double zx[3] = {0, l1, x2}, zy[3] = {0, 0, y2};
    const double weight = 1 / std::sqrt(twice_area);
    // Coefficient of (u_j, v_j) in the real row and the imaginary row: W_j = z_{j+2} - z_{j+1}
    // = c + i d times w_j = u + i v gives (c u - d v) + i (d u + c v).
    int32_t var[6];
    double row[2][6];
    for (int j = 0; j < 3; ++j) {
      const double c = (zx[(j + 2) % 3] - zx[(j + 1) % 3]) * weight;
      const double d = (zy[(j + 2) % 3] - zy[(j + 1) % 3]) * weight;
      var[2 * j] = t[j];
      var[2 * j + 1] = t[j];
      row[0][2 * j] = c, row[0][2 * j + 1] = -d;
      row[1][2 * j] = d, row[1][2 * j + 1] = c;
    }
    for (int r = 0; r < 2; ++r)
      for (int a = 0; a < 6; ++a) {
        const int32_t va = var[a];
        if (index[va] < 0) continue;
        const int64_t ia = 2 * int64_t(index[va]) + (a & 1);
        for (int b = 0; b < 6; ++b) {
          const int32_t vb = var[b];
          const double prod = row[r][a] * row[r][b];
          if (index[vb] < 0) {
            rhs[ia] -= prod * pinned[pin_of(vb)][b & 1];
          } else {
            entries.emplace_back(ia, 2 * int64_t(index[vb]) + (b & 1), prod);
          }
        }
      }
  }
}

}  // namespace

bool conformal_map(const std::vector<D3>& positions, const std::vector<int32_t>& corners,
                   const std::vector<char>& weighted, std::vector<std::array<double, 2>>& xy) {
  const int32_t n = static_cast<int32_t>(positions.size());
  const size_t F = corners.size() / 3;
  if (n < 3) return false;
  std::vector<char> used(n, 0);
  for (size_t f = 0; f < F; ++f)
    if (weighted[f])
      for (int k = 0; k < 3; ++k) used[corners[3 * f + k]] = 1;
  for (char u : used)
    if (!u) return false;
  const auto [pa, pb] = pins(positions);
  const double span = std::sqrt(dot(minus(positions[pb], positions[pa]),
                                    minus(positions[pb], positions[pa])));
  if (pa == pb || !(span > 0)) return false;
  // Unknowns: u and v of every vertex but the pins, as 2 * index and 2 * index + 1.
  std::vector<int32_t> index(n, -1);
  int32_t unknowns = 0;
  for (int32_t v = 0; v < n; ++v)
    if (v != pa && v != pb) index[v] = unknowns++;
  const double pinned[2][2] = {{0, 0}, {span, 0}};
  auto pin_of = [&](int32_t v) { return v == pa ? 0 : 1; };

  std::vector<Eigen::Triplet<double>> entries;
  Eigen::VectorXd rhs = Eigen::VectorXd::Zero(2 * int64_t(unknowns));
  normal_equations(positions, corners, weighted, index, pinned, pin_of, entries, rhs);
  Eigen::SparseMatrix<double> normal(2 * int64_t(unknowns), 2 * int64_t(unknowns));
  normal.setFromTriplets(entries.begin(), entries.end());
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>> solver(normal);
  if (solver.info() != Eigen::Success) return false;
  const Eigen::VectorXd x = solver.solve(rhs);
  if (solver.info() != Eigen::Success || !x.allFinite()) return false;
  xy.resize(n);
  for (int32_t v = 0; v < n; ++v) {
    if (index[v] < 0) {
      xy[v] = {pinned[pin_of(v)][0], pinned[pin_of(v)][1]};
    } else {
      xy[v] = {x[2 * int64_t(index[v])], x[2 * int64_t(index[v]) + 1]};
    }
  }
  return true;
}

}  // namespace s3d::mesh
