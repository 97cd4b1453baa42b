// The sparse volume's lookup and trilinear sampling against brute force over a dense grid:
// every present voxel weighted by max(0, 1 - |g - x - 0.5|) per axis, renormalised, at odd
// grid sizes with random occupancy, at points inside, on the borders and outside the grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "../expect_error.h"
#include "mesh/volume.h"

namespace s3d::mesh {
namespace {

struct Dense {
  std::array<int32_t, 3> size;
  int32_t channels;
  std::vector<int64_t> row;  // per cell: the voxel's row, or -1
  std::vector<int32_t> coords;
  std::vector<float> attrs;
};

Dense random_dense(std::array<int32_t, 3> size, int32_t channels, double occupancy, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3, 5);
  std::bernoulli_distribution present(occupancy);
  Dense d{size, channels, {}, {}, {}};
  d.row.assign(int64_t(size[0]) * size[1] * size[2], -1);
  // Voxels listed in a shuffled order, so rows do not follow the linear index.
  std::vector<std::array<int32_t, 3>> cells;
  for (int32_t x = 0; x < size[0]; ++x)
    for (int32_t y = 0; y < size[1]; ++y)
      for (int32_t z = 0; z < size[2]; ++z)
        if (present(rng)) cells.push_back({x, y, z});
  std::shuffle(cells.begin(), cells.end(), rng);
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& c = cells[i];
    d.coords.insert(d.coords.end(), {c[0], c[1], c[2]});
    for (int32_t k = 0; k < channels; ++k) d.attrs.push_back(u(rng));
    d.row[(int64_t(c[0]) * size[1] + c[1]) * size[2] + c[2]] = static_cast<int64_t>(i);
  }
  return d;
}

// Brute force over every cell of the grid.
std::vector<float> reference_sample(const Dense& d, const float g[3]) {
  std::vector<double> acc(d.channels, 0.0);
  double w_sum = 0;
  if (!(std::isfinite(g[0]) && std::isfinite(g[1]) && std::isfinite(g[2])))
    return std::vector<float>(d.channels, 0.0f);
  for (int32_t x = 0; x < d.size[0]; ++x)
    for (int32_t y = 0; y < d.size[1]; ++y)
      for (int32_t z = 0; z < d.size[2]; ++z) {
        const int64_t r = d.row[(int64_t(x) * d.size[1] + y) * d.size[2] + z];
        if (r < 0) continue;
        const double w = std::max(0.0, 1 - std::fabs(g[0] - x - 0.5)) *
                         std::max(0.0, 1 - std::fabs(g[1] - y - 0.5)) *
                         std::max(0.0, 1 - std::fabs(g[2] - z - 0.5));
        if (w == 0) continue;
        w_sum += w;
        for (int32_t c = 0; c < d.channels; ++c) acc[c] += w * d.attrs[r * d.channels + c];
      }
  std::vector<float> out(d.channels, 0.0f);
  if (w_sum < 1e-12) return out;
  for (int32_t c = 0; c < d.channels; ++c) out[c] = static_cast<float>(acc[c] / w_sum);
  return out;
}

std::vector<float> test_points(const std::array<int32_t, 3>& size, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> pts;
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k)
      pts.push_back(std::uniform_real_distribution<float>(-2.0f, size[k] + 2.0f)(rng));
  // Borders, voxel centres, exact halves and far outside.
  const float special[] = {0.0f, 0.5f, 1.0f, 1.5f, -0.5f, -1.0f, -0.999f};
  for (float a : special)
    for (float b : special) {
      pts.insert(pts.end(), {a, b, float(size[2]) - a});
      pts.insert(pts.end(), {float(size[0]) + a, float(size[1]) - 0.5f, b});
      pts.insert(pts.end(), {float(size[0]) * 0.5f, a, b + 2.0f});
    }
  pts.insert(pts.end(), {1e30f, 0.5f, 0.5f, -1e30f, 1.0f, 1.0f, 2.5f, 2.5f, 2.5f});
  return pts;
}

void expect_matches_reference(const Dense& d, const std::vector<float>& pts) {
  SparseVolume vol(d.coords, d.attrs, d.channels, d.size);
  const int64_t n = static_cast<int64_t>(pts.size() / 3);
  std::vector<float> out(n * d.channels, std::numeric_limits<float>::quiet_NaN());
  vol.sample_trilinear(pts.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> ref = reference_sample(d, &pts[3 * i]);
    for (int32_t c = 0; c < d.channels; ++c) {
      ASSERT_NEAR(out[i * d.channels + c], ref[c], 2e-5f)
          << "point " << i << " (" << pts[3 * i] << ", " << pts[3 * i + 1] << ", " << pts[3 * i + 2]
          << ") channel " << c;
    }
  }
}

TEST(MeshVolume, FindMatchesDenseGrid) {
  const Dense d = random_dense({7, 5, 9}, 2, 0.4, 11);
  SparseVolume vol(d.coords, d.attrs, d.channels, d.size);
  EXPECT_EQ(vol.num_voxels(), static_cast<int64_t>(d.coords.size() / 3));
  EXPECT_EQ(vol.channels(), 2);
  for (int32_t x = -2; x < 9; ++x)
    for (int32_t y = -2; y < 7; ++y)
      for (int32_t z = -2; z < 11; ++z) {
        const bool inside = x >= 0 && y >= 0 && z >= 0 && x < 7 && y < 5 && z < 9;
        const int64_t want = inside ? d.row[(int64_t(x) * 5 + y) * 9 + z] : -1;
        ASSERT_EQ(vol.find(x, y, z), want) << x << " " << y << " " << z;
      }
}

TEST(MeshVolume, SamplesLikeBruteForceAtOddSizes) {
  expect_matches_reference(random_dense({7, 5, 9}, 3, 0.45, 1), test_points({7, 5, 9}, 601, 2));
  expect_matches_reference(random_dense({1, 3, 1}, 1, 0.7, 3), test_points({1, 3, 1}, 201, 4));
  expect_matches_reference(random_dense({13, 11, 3}, 5, 0.15, 5), test_points({13, 11, 3}, 401, 6));
  // Full occupancy: every interior point has all eight neighbours.
  expect_matches_reference(random_dense({5, 5, 5}, 2, 1.0, 7), test_points({5, 5, 5}, 301, 8));
}

TEST(MeshVolume, ReproducesLinearFieldInsideFullGrid) {
  // On a full grid the renormalised weights are the plain trilinear ones, which reproduce an
  // affine field exactly between voxel centres.
  const std::array<int32_t, 3> size{9, 7, 5};
  std::vector<int32_t> coords;
  std::vector<float> attrs;
  for (int32_t x = 0; x < 9; ++x)
    for (int32_t y = 0; y < 7; ++y)
      for (int32_t z = 0; z < 5; ++z) {
        coords.insert(coords.end(), {x, y, z});
        attrs.push_back(0.25f + 0.5f * (x + 0.5f) - 0.75f * (y + 0.5f) + 0.125f * (z + 0.5f));
      }
  SparseVolume vol(coords, attrs, 1, size);
  std::mt19937 rng(9);
  std::vector<float> pts;
  for (int i = 0; i < 301; ++i)
    for (int k = 0; k < 3; ++k)
      pts.push_back(std::uniform_real_distribution<float>(0.5f, size[k] - 0.5f)(rng));
  std::vector<float> out(301, std::numeric_limits<float>::quiet_NaN());
  vol.sample_trilinear(pts.data(), 301, out.data());
  for (int i = 0; i < 301; ++i) {
    const float want = 0.25f + 0.5f * pts[3 * i] - 0.75f * pts[3 * i + 1] + 0.125f * pts[3 * i + 2];
    ASSERT_NEAR(out[i], want, 1e-5f) << i;
  }
}

TEST(MeshVolume, PointsWithoutNeighboursSampleZero) {
  SparseVolume vol({1, 1, 1, 3, 1, 1}, {7.0f, -2.0f, 9.0f, 9.0f}, 2, {5, 3, 3});
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  // Outside, far away, not finite; and a point whose only present neighbour has weight 0
  // (2.5 is absent voxel 2's centre; present voxel 3 lies a whole voxel away).
  const std::vector<float> pts = {-0.6f, 1.5f, 1.5f, 50,   50,   50,   nan,  1.5f, 1.5f,
                                  inf,   1.5f, 1.5f, 2.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f};
  std::vector<float> out(12, nan);
  vol.sample_trilinear(pts.data(), 6, out.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  EXPECT_EQ(out[10], 7.0f);
  EXPECT_EQ(out[11], -2.0f);
}

TEST(MeshVolume, ManyVoxelsAllFound) {
  const Dense d = random_dense({41, 37, 43}, 1, 0.3, 21);
  SparseVolume vol(d.coords, d.attrs, 1, d.size);
  for (int64_t i = 0; i < vol.num_voxels(); ++i)
    ASSERT_EQ(vol.find(d.coords[3 * i], d.coords[3 * i + 1], d.coords[3 * i + 2]), i);
}

TEST(MeshVolume, RejectsBadInput) {
  EXPECT_ERROR(SparseVolume({0, 0, 0, 1, 3, 0}, {1, 2}, 1, {3, 3, 3}),
               "voxel 1 (1, 3, 0) lies outside the grid");
  EXPECT_ERROR(SparseVolume({0, 0, 0, -1, 0, 0}, {1, 2}, 1, {3, 3, 3}), "voxel 1");
  EXPECT_ERROR(SparseVolume({0, 1, 2, 2, 2, 2, 0, 1, 2}, {1, 2, 3}, 1, {3, 3, 3}),
               "voxel 2 (0, 1, 2) repeats voxel 0");
  EXPECT_ERROR(SparseVolume({0, 0, 0, 1, 1, 1}, {1, 2, 3, std::numeric_limits<float>::quiet_NaN()},
                            2, {3, 3, 3}),
               "voxel 1 channel 1 is not finite");
  EXPECT_ERROR(SparseVolume({0, 0, 0}, {1}, 1, {3, 0, 3}), "must be positive");
  EXPECT_ERROR(SparseVolume({0, 0, 0}, {1}, 0, {3, 3, 3}), "channels");
  EXPECT_ERROR(SparseVolume({0, 0, 0}, {1, 2}, 1, {3, 3, 3}), "need 1 attributes");
  EXPECT_ERROR(SparseVolume({0, 0}, {1}, 1, {3, 3, 3}), "whole triples");
}

}  // namespace
}  // namespace s3d::mesh
