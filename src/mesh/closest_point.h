// The closest point on a triangle, shared by the CPU BVH and its CUDA twin so that both give
// the same bits: double arithmetic, the same operations in the same order (the build turns
// off FMA contraction for host and device code alike).
#pragma once

#if defined(__CUDACC__)
#define S3D_MESH_HD __host__ __device__ __forceinline__
#else
#define S3D_MESH_HD inline
#endif

namespace s3d::mesh {

// Barycentric weights (a, b, c) of the point of triangle abc closest to p (Voronoi-region
// walk over vertex, edge and face regions); returns the squared distance as a float.
S3D_MESH_HD float closest_on_triangle(const float p[3], const float a[3], const float b[3],
                                      const float c[3], float uvw[3]) {
  double ab[3], ac[3], ap[3], bp[3], cp[3];
  for (int k = 0; k < 3; ++k) {
    ab[k] = double(b[k]) - a[k];
    ac[k] = double(c[k]) - a[k];
    ap[k] = double(p[k]) - a[k];
    bp[k] = double(p[k]) - b[k];
    cp[k] = double(p[k]) - c[k];
  }
  const double d1 = ab[0] * ap[0] + ab[1] * ap[1] + ab[2] * ap[2];
  const double d2 = ac[0] * ap[0] + ac[1] * ap[1] + ac[2] * ap[2];
  const double d3 = ab[0] * bp[0] + ab[1] * bp[1] + ab[2] * bp[2];
  const double d4 = ac[0] * bp[0] + ac[1] * bp[1] + ac[2] * bp[2];
  const double d5 = ab[0] * cp[0] + ab[1] * cp[1] + ab[2] * cp[2];
  const double d6 = ac[0] * cp[0] + ac[1] * cp[1] + ac[2] * cp[2];
  const double vc = d1 * d4 - d3 * d2, vb = d5 * d2 - d1 * d6, va = d3 * d6 - d5 * d4;
  double u = 1, v = 0, w = 0;
  if (d1 <= 0 && d2 <= 0) {
    u = 1, v = 0, w = 0;
  } else if (d3 >= 0 && d4 <= d3) {
    u = 0, v = 1, w = 0;
  } else if (vc <= 0 && d1 >= 0 && d3 <= 0) {
    const double t = d1 / (d1 - d3);
    u = 1 - t, v = t, w = 0;
  } else if (d6 >= 0 && d5 <= d6) {
    u = 0, v = 0, w = 1;
  } else if (vb <= 0 && d2 >= 0 && d6 <= 0) {
    const double t = d2 / (d2 - d6);
    u = 1 - t, v = 0, w = t;
  } else if (va <= 0 && (d4 - d3) >= 0 && (d5 - d6) >= 0) {
    const double t = (d4 - d3) / ((d4 - d3) + (d5 - d6));
    u = 0, v = 1 - t, w = t;
  } else {
    const double denom = va + vb + vc;
    if (denom > 0) v = vb / denom, w = vc / denom, u = 1 - v - w;
  }
  uvw[0] = static_cast<float>(u);
  uvw[1] = static_cast<float>(v);
  uvw[2] = static_cast<float>(w);
  double d2sum = 0;
  for (int k = 0; k < 3; ++k) {
    const double q = u * a[k] + v * b[k] + w * c[k];
    const double d = p[k] - q;
    d2sum += d * d;
  }
  return static_cast<float>(d2sum);
}

// Squared distance from p to the box [lo, hi] (0 inside).
S3D_MESH_HD float box_distance2(const float lo[3], const float hi[3], const float p[3]) {
  float d2 = 0;
  for (int k = 0; k < 3; ++k) {
    float d = lo[k] - p[k];
    const float e = p[k] - hi[k];
    d = d > e ? d : e;
    d = d > 0 ? d : 0;
    d2 += d * d;
  }
  return d2;
}

// The traversal's pruning, with room for rounding: a box is skipped only when its squared
// distance exceeds the best face's by more than rounding explains (2^-10 of it, plus 2^-40 of
// the point's squared magnitude, at least 1, for the cancellation in a face's distance). A box
// holding a face whose distance rounds to the best one is therefore always searched, so ties
// go to the lower face index whatever the tree (brute force's answer), which is what lets the
// CPU's tree and the one built on the device give the same bits.
S3D_MESH_HD float prune_reach(const float p[3]) {
  const float m = p[0] * p[0] + p[1] * p[1] + p[2] * p[2];
  return (m > 1 ? m : 1) * 0x1p-40f;
}
S3D_MESH_HD bool out_of_reach(float box_d2, float best_d2, float reach) {
  return box_d2 > best_d2 + best_d2 * 0x1p-10f + reach;
}

}  // namespace s3d::mesh
