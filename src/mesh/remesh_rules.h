// The narrow-band dual-contouring remesh's per-voxel rules (remesh.h), shared by the CPU
// sweep (remesh.cpp) and the GPU kernels (remesh_cuda.cu) so that both give the same bits:
// the same float operations in the same order (the build turns off FMA contraction for host
// and device code alike). Neighbours come in a 3 x 3 x 3 block, slot
// (dx + 1) * 9 + (dy + 1) * 3 + dz + 1, an index or -1 for an absent voxel; how a caller
// finds them (sorted sweeps on the CPU, a hash table on the GPU) is its own business.
// Private to the mesh layer.
#pragma once

#include <cstdint>

#include "mesh/closest_point.h"  // S3D_MESH_HD

namespace s3d::mesh::remesh_rules {

// Corner (or child) o of a voxel is at offset ((o >> 0) & 1, (o >> 1) & 1, (o >> 2) & 1):
// CuMesh's order.
S3D_MESH_HD int corner_offset(int o, int axis) { return (o >> axis) & 1; }

S3D_MESH_HD int block_slot(int dx, int dy, int dz) { return (dx + 1) * 9 + (dy + 1) * 3 + dz + 1; }

// Set bits of a byte.
S3D_MESH_HD int bit_count(unsigned x) {
  int n = 0;
  for (; x; x &= x - 1) ++n;
  return n;
}

// A grid position (in voxels, along one axis) in world units.
S3D_MESH_HD float world(float grid, float res, float scale, float center) {
  return (grid / res - 0.5f) * scale + center;
}

// Whether a voxel whose centre is at unsigned distance `udf` can hold part of the band.
S3D_MESH_HD bool in_band(float udf, float eps, float limit) {
  const float d = udf - eps;
  return (d < 0 ? -d : d) < limit;
}

// Whether a voxel whose centre is at unsigned distance `udf` lies wholly outside the band (not
// in_band, and on the far side): every point of it is then at least 0.87 - sqrt(3) / 2 of its
// edge farther than eps from the surface. The cavity fill walks these.
S3D_MESH_HD bool outside_band(float udf, float eps, float limit) { return udf - eps >= limit; }

// The cavity rule, per voxel: of the edges at its high corner that change sign (dir), those
// whose outer end (the corner with a non-negative value) the fill did not reach lose their
// quad (dir set to 0). `reached` bit o: corner o's space outside the band is joined to the
// grid's border. Returns how many were dropped.
S3D_MESH_HD int drop_unreached(unsigned reached, int8_t dir[3]) {
  int dropped = 0;
  for (int a = 0; a < 3; ++a) {
    if (!dir[a]) continue;
    const int outer = dir[a] == 1 ? 7 : 7 ^ (1 << a);
    if (!(reached >> outer & 1)) dir[a] = 0, ++dropped;
  }
  return dropped;
}

// Which voxel sharing corner `o` of the voxel at the block's centre owns that corner: the one
// with the smallest key (offsets d = o - e, e in {0, 1}^3, in ascending order). Returns its
// block slot; the centre (13) itself is always a candidate.
template <class Index>
S3D_MESH_HD int corner_owner(const Index nb[27], int o) {
  const int ox = corner_offset(o, 0), oy = corner_offset(o, 1), oz = corner_offset(o, 2);
  for (int dx = ox - 1; dx <= ox; ++dx)
    for (int dy = oy - 1; dy <= oy; ++dy)
      for (int dz = oz - 1; dz <= oz; ++dz)
        if (nb[block_slot(dx, dy, dz)] >= 0) return block_slot(dx, dy, dz);
  return 13;
}

// The corners (bit o) the voxel at the block's centre owns.
template <class Index>
S3D_MESH_HD unsigned owned_corners(const Index nb[27]) {
  unsigned mask = 0;
  for (int o = 0; o < 8; ++o)
    if (corner_owner(nb, o) == 13) mask |= 1u << o;
  return mask;
}

// The grid vertex of corner o of the voxel at the centre of `nb`: voxel w owns the corners
// in owned[w], numbered from first[w] in corner order.
template <class Index, class Owned, class First>
S3D_MESH_HD int64_t corner_vertex(const Index nb[27], int o, const Owned* owned,
                                  const First* first) {
  const int slot = corner_owner(nb, o);
  const Index w = nb[slot];
  const int d[3] = {slot / 9 - 1, slot / 3 % 3 - 1, slot % 3 - 1};
  const int e = (corner_offset(o, 0) - d[0]) + 2 * (corner_offset(o, 1) - d[1]) +
                4 * (corner_offset(o, 2) - d[2]);
  return static_cast<int64_t>(first[w]) + bit_count(unsigned(owned[w]) & ((1u << e) - 1));
}

// Per voxel at grid position c with corner values val[8]: the dual vertex in grid units (the
// mean of the zero crossings on its 12 edges, the centre when none) and, per axis, the sign
// change of the edge at its high corner (+1: negative to non-negative going up the axis, -1:
// the other way, 0: none).
S3D_MESH_HD void contour_voxel(const float val[8], const int32_t c[3], float* dual,
                               int8_t* dir) {
  float sum[3] = {0, 0, 0};
  int count = 0;
  for (int a = 0; a < 3; ++a) {
    const int b = a == 0 ? 1 : 0, cc = a == 2 ? 1 : 2;  // CuMesh's (u, v) axes per edge axis
    for (int u = 0; u <= 1; ++u)
      for (int v = 0; v <= 1; ++v) {
        int lo[3] = {0, 0, 0};
        lo[b] = u, lo[cc] = v;
        int hi[3] = {lo[0], lo[1], lo[2]};
        hi[a] = 1;
        const float v1 = val[lo[0] + 2 * lo[1] + 4 * lo[2]];
        const float v2 = val[hi[0] + 2 * hi[1] + 4 * hi[2]];
        const bool changes = (v1 < 0 && v2 >= 0) || (v1 >= 0 && v2 < 0);
        if (changes) {
          const float t = -v1 / (v2 - v1);
          for (int k = 0; k < 3; ++k)
            sum[k] += k == a ? static_cast<float>(c[k]) + t : static_cast<float>(c[k] + lo[k]);
          ++count;
        }
        if (u == 1 && v == 1) dir[a] = static_cast<int8_t>(changes ? (v1 < 0 ? 1 : -1) : 0);
      }
  }
  for (int k = 0; k < 3; ++k)
    dual[k] = count > 0 ? sum[k] / static_cast<float>(count) : static_cast<float>(c[k]) + 0.5f;
}

// The offset (bits as corner_offset's) of the j-th voxel around the lattice edge along axis
// a at a voxel's high corner, the voxel itself first, in the order their dual vertices make
// the quad (o-voxel's and CuMesh's table): a = 0: (0,0,0) (0,0,1) (0,1,1) (0,1,0); a = 1:
// (0,0,0) (1,0,0) (1,0,1) (0,0,1); a = 2: (0,0,0) (0,1,0) (1,1,0) (1,0,0).
S3D_MESH_HD int edge_ring_offset(int a, int j) {
  return static_cast<int>((0x132045102640ull >> (4 * (4 * a + j))) & 0xF);
}

// Quad q (vertex indices, positions pos as xyz triples) split into two triangles tri[6] as
// CuMesh splits it: its alignment of the second split multiplies by a zero normal (a cross
// product of a vector with itself) and that of the first squares the normal of the first
// candidate triangle, so the first split stays unless that triangle is degenerate in float.
// `up`: the edge's sign change goes from negative to non-negative.
template <class Vertex>
S3D_MESH_HD void split_quad(const float* pos, const Vertex q[4], bool up, Vertex* tri) {
  // The corners of the two triangles for each split, per `up`.
  const int first[2][6] = {{0, 1, 2, 0, 2, 3}, {0, 2, 1, 0, 3, 2}};
  const int second[2][6] = {{0, 1, 3, 3, 1, 2}, {0, 3, 1, 3, 2, 1}};
  float p[4][3];
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 3; ++k) p[j][k] = pos[3 * static_cast<int64_t>(q[first[up][j]]) + k];
  float e0[3], e1[3], e2[3], e3[3];
  for (int k = 0; k < 3; ++k) {
    e0[k] = p[1][k] - p[0][k], e1[k] = p[2][k] - p[0][k];
    e2[k] = p[2][k] - p[1][k], e3[k] = p[3][k] - p[1][k];
  }
  const float n0[3] = {e0[1] * e1[2] - e0[2] * e1[1], e0[2] * e1[0] - e0[0] * e1[2],
                       e0[0] * e1[1] - e0[1] * e1[0]};
  const float n1[3] = {e2[1] * e3[2] - e2[2] * e3[1], e2[2] * e3[0] - e2[0] * e3[2],
                       e2[0] * e3[1] - e2[1] * e3[0]};
  const float d = n0[0] * n1[0] + n0[1] * n1[1] + n0[2] * n1[2];
  const int* order = (d < 0 ? -d : d) > 0 ? first[up] : second[up];
  for (int j = 0; j < 6; ++j) tri[j] = q[order[j]];
}

}  // namespace s3d::mesh::remesh_rules
