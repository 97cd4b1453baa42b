// The least-squares conformal map (mesh/conformal.h) against what it must give exactly: a flat
// sheet turned anywhere in space, and a sheet bent around a cylinder (developable, each face
// flat), are laid out isometrically (every edge its length in space, since the pins sit at
// their distance in space), nothing turned over; a doubly curved cap is laid out with no face
// turned over; and a vertex no weighted face holds is refused with the output untouched.
// Odd, jittered grids; the output poisoned before each call.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "mesh/conformal.h"

namespace s3d::mesh {
namespace {

using P3 = std::array<double, 3>;
using P2 = std::array<double, 2>;

struct Sheet {
  std::vector<P3> positions;
  std::vector<int32_t> corners;
};

// A grid of nx x ny vertices over [0, w] x [0, h], interior vertices jittered in y and, with
// `jitter_x`, in x; `place` maps (x, y) into space.
template <class Place>
Sheet grid(int nx, int ny, double w, double h, uint32_t seed, Place place, bool jitter_x = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(-0.3, 0.3);
  Sheet s;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      double x = w * i / (nx - 1), y = h * j / (ny - 1);
      if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1)
        x += (jitter_x ? jitter(rng) : 0.0) * w / (nx - 1), y += jitter(rng) * h / (ny - 1);
      s.positions.push_back(place(x, y));
    }
  for (int j = 0; j + 1 < ny; ++j)
    for (int i = 0; i + 1 < nx; ++i) {
      const int32_t a = j * nx + i, b = a + 1, c = a + nx, d = c + 1;
      if ((i + j) % 2) s.corners.insert(s.corners.end(), {a, b, d, a, d, c});
      else s.corners.insert(s.corners.end(), {a, b, c, b, d, c});
    }
  return s;
}

double dist(const P3& a, const P3& b) {
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) +
                   (a[2] - b[2]) * (a[2] - b[2]));
}
double dist(const P2& a, const P2& b) { return std::hypot(a[0] - b[0], a[1] - b[1]); }

std::vector<char> all_faces(const Sheet& s) { return std::vector<char>(s.corners.size() / 3, 1); }

std::vector<P2> poisoned(size_t n) { return std::vector<P2>(n, P2{NAN, NAN}); }

// The largest relative difference between an edge's length in the plane and in space, once
// the plane's lengths are scaled by one factor (the pins sit at their straight distance in
// space, which a bent sheet does not keep), and the number of faces turned over or flat.
std::pair<double, int> check(const Sheet& s, const std::vector<P2>& xy) {
  double plane = 0, space = 0;
  for (size_t f = 0; f < s.corners.size() / 3; ++f)
    for (int k = 0; k < 3; ++k) {
      const int32_t a = s.corners[3 * f + k], b = s.corners[3 * f + (k + 1) % 3];
      plane += dist(xy[a], xy[b]), space += dist(s.positions[a], s.positions[b]);
    }
  const double scale = space / plane;
  double worst = 0;
  int turned = 0;
  for (size_t f = 0; f < s.corners.size() / 3; ++f) {
    const int32_t* t = &s.corners[3 * f];
    for (int k = 0; k < 3; ++k) {
      const int32_t a = t[k], b = t[(k + 1) % 3];
      const double in_space = dist(s.positions[a], s.positions[b]);
      worst = std::max(worst, std::fabs(scale * dist(xy[a], xy[b]) - in_space) / in_space);
    }
    const P2 &p = xy[t[0]], &q = xy[t[1]], &r = xy[t[2]];
    turned += !((q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0]) > 0);
  }
  return {worst, turned};
}

TEST(MeshConformal, FlatSheetAnywhereInSpaceIsLaidOutIsometrically) {
  // A plane through a point, spanned by two orthonormal vectors at no special angle.
  const P3 o{0.3, -1.2, 2.5}, u{0.6, 0.0, 0.8}, v{-0.48, 0.6, 0.36};
  const Sheet s = grid(11, 7, 1.7, 0.9, 5, [&](double x, double y) {
    return P3{o[0] + x * u[0] + y * v[0], o[1] + x * u[1] + y * v[1], o[2] + x * u[2] + y * v[2]};
  });
  std::vector<P2> xy = poisoned(s.positions.size());
  ASSERT_TRUE(conformal_map(s.positions, s.corners, all_faces(s), xy));
  for (const P2& p : xy) ASSERT_TRUE(std::isfinite(p[0]) && std::isfinite(p[1]));
  const auto [worst, turned] = check(s, xy);
  EXPECT_LT(worst, 1e-9);
  // Flat, the pins' distance is the sheet's own: the scale is 1 without rescaling.
  EXPECT_NEAR(dist(xy[0], xy[10]), dist(s.positions[0], s.positions[10]), 1e-9);
  EXPECT_EQ(turned, 0);
}

TEST(MeshConformal, SheetBentAroundACylinderUnrollsWithoutStretch) {
  // A strip bent through 150 degrees about the y axis (radius 0.4), its vertices on 23 of the
  // cylinder's rulings (jittered along them only): each face lies in the plane of two
  // neighbouring rulings, so the strip is a developable polyhedron and unrolls exactly.
  const double radius = 0.4, turn = 150.0 * M_PI / 180.0;
  const Sheet s = grid(
      23, 5, radius * turn, 0.7, 9,
      [&](double x, double y) {
        const double a = x / radius;
        return P3{radius * std::sin(a), y, radius * (1 - std::cos(a))};
      },
      false);
  std::vector<P2> xy = poisoned(s.positions.size());
  ASSERT_TRUE(conformal_map(s.positions, s.corners, all_faces(s), xy));
  const auto [worst, turned] = check(s, xy);
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(turned, 0);
}

TEST(MeshConformal, CapOfASphereTurnsNoFaceOver) {
  // 60 degrees of a unit sphere about +z: doubly curved, so only conformal, not isometric.
  const Sheet s = grid(17, 13, 2.0, 2.0, 3, [&](double x, double y) {
    const double px = (x - 1.0) * 0.6, py = (y - 1.0) * 0.6;  // |p| <= 0.85
    return P3{px, py, std::sqrt(1.0 - px * px - py * py)};
  });
  std::vector<P2> xy = poisoned(s.positions.size());
  ASSERT_TRUE(conformal_map(s.positions, s.corners, all_faces(s), xy));
  const auto [worst, turned] = check(s, xy);
  EXPECT_EQ(turned, 0);
  EXPECT_LT(worst, 0.5);  // a cap this flat keeps its lengths within a factor well under 2
}

TEST(MeshConformal, VertexOfNoWeightedFaceIsRefused) {
  const Sheet s = grid(5, 3, 1.0, 1.0, 1, [](double x, double y) { return P3{x, y, 0}; });
  std::vector<char> weighted(s.corners.size() / 3, 1);
  weighted[0] = 0;  // face 0 holds vertex 0 alone (the grid's first corner)
  std::vector<P2> xy = poisoned(s.positions.size());
  EXPECT_FALSE(conformal_map(s.positions, s.corners, weighted, xy));
  for (const P2& p : xy) EXPECT_TRUE(std::isnan(p[0]) && std::isnan(p[1]));
  // Too few vertices, or all at one point (no two pins apart).
  EXPECT_FALSE(conformal_map({{0, 0, 0}, {1, 0, 0}}, {0, 1, 1}, {1}, xy));
  EXPECT_FALSE(conformal_map({{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, {0, 1, 2}, {1}, xy));
}

}  // namespace
}  // namespace s3d::mesh
