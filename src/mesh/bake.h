// Texture baking in UV space (to_glb's nvdiffrast rasterization, BVH projection, grid sample
// and cv2 inpainting), and seam filling.
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/atlas.h"
#include "mesh/bvh.h"
#include "mesh/volume.h"

namespace s3d::mesh {

// Which face covers each texel centre, and where. Texel (row r, column c) has its centre at
// uv = ((c + 0.5) / size, (r + 0.5) / size); a texel is covered by a face when its centre lies
// inside the face's UV triangle (edges shared by two faces go to exactly one of them: the
// top-left rule); where faces overlap, the higher face index wins (nvdiffrast's chunked
// rasterization in to_glb keeps the last chunk's face).
struct UvRaster {
  int32_t size = 0;
  Unfilled<int32_t> face;  // size*size, -1 where uncovered
  Unfilled<float> bary;    // 2 per texel: weights of the face's 2nd and 3rd vertices
};
UvRaster rasterize_uv(const UvMesh& m, int32_t size);

// Gives each uncovered texel whose centre lies within `radius` texels of a face's UV triangle
// the nearest such face (Euclidean distance to the triangle; ties to the lower face index),
// preferring faces less than 1 texel away in max norm: the faces at whose points bilinear
// filtering reads the texel. Charts at least 2 texels apart in max norm (the atlas's padding
// + 1) then read only their own texels, even past a corner where another chart's edge is
// nearer in Euclidean distance. Each texel gets the barycentrics of its own centre in its
// face's UV triangle: outside [0, 1], the face's plane continued past the chart's edge. The
// bake then gives the texels that bilinear filtering reads just outside a chart the surface's
// own values there, not a fill. Measured to the triangle, not to the nearest covered texel
// centre: a face too small to cover any texel centre (a chart of a face or two) still gets the
// texels around it, where a covered texel of another chart would otherwise lend them a colour
// from elsewhere on the surface. Returns how many texels it gave a face. Covered texels are
// unchanged; radius 0 changes nothing.
int64_t dilate_raster(UvRaster& raster, const UvMesh& m, int32_t radius);

// The texel centres (row * size + column) the UV triangle (uv0, uv1, uv2) covers at `size`
// under rasterize_uv's rules, appended to out (the atlas's overlap check). Either winding.
void covered_texels(const float* uv0, const float* uv1, const float* uv2, int32_t size,
                    std::vector<int64_t>& out);

class DeviceVolume;  // bake_cuda.h

struct BakeInputs {
  const UvMesh* uv_mesh = nullptr;    // the output mesh, with UVs
  const Bvh* surface = nullptr;       // the decoded surface (before simplification)
  const SparseVolume* volume = nullptr;
  Vec3 grid_origin{-0.5f, -0.5f, -0.5f};  // aabb low corner
  Vec3 voxel_size{1, 1, 1};
  // The volume's device copy: with it, and the surface's BVH on the device, each texel's
  // closest point and volume sample are one GPU kernel (bake_cuda.h; the same bits).
  const DeviceVolume* device_volume = nullptr;
};


// attrs: size*size*channels floats (0 where uncovered), mask: size*size (1 where covered).
struct BakedTexture {
  int32_t size = 0;
  int32_t channels = 0;
  Unfilled<float> attrs;
  std::vector<uint8_t> mask;
};
// For every covered texel: its position on the output mesh, projected onto the decoded
// surface (closest point), sampled trilinearly in the volume.
BakedTexture bake(const UvRaster& raster, const BakeInputs& in);

// Fills every texel whose mask is 0 in an 8-bit image (channels interleaved) from the covered
// texels around it, so that bilinear filtering and mipmaps at chart borders see chart colours,
// not black (to_glb uses cv2's TELEA inpainting; here a pull-push pyramid: docs/EXPORT.md).
// Covered texels are left unchanged. An image with no covered texel is left as it is.
void fill_uncovered(std::vector<uint8_t>& image, const std::vector<uint8_t>& mask,
                    int32_t width, int32_t height, int32_t channels);

}  // namespace s3d::mesh
