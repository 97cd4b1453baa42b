// The GLB export's CUDA stages against their CPU references, on random odd-sized inputs into
// poisoned outputs: the BVH's closest-point queries and the remesh, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../mesh/mesh_test_shapes.h"
#include "../mesh/voxel_test_shapes.h"
#include "core/cuda_util.h"
#include "core/tensor.h"
#include "gpu_test_util.h"
#include "mesh/bvh.h"
#include "mesh/bvh_cuda.h"
#include "mesh/remesh.h"
#include "sparse3d/glb.h"

namespace s3d::mesh {
namespace {

using test::uv_sphere;

void expect_same_hits(const TriMesh& m, int64_t n, float spread, uint32_t seed) {
  const Bvh bvh(m);
  const DeviceBvh dev(bvh);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> pts(3 * n);
  for (auto& x : pts) x = u(rng);
  std::vector<ClosestHit> cpu(n);
  bvh.closest_many(pts.data(), n, cpu.data());
  Tensor d_pts = Tensor::from_floats(pts, {n, 3}, DType::F32).to(Device::CUDA);
  const int64_t words = n * static_cast<int64_t>(sizeof(ClosestHit)) / 4;
  Tensor d_out = Tensor::empty({words}, DType::I32, Device::CUDA);
  S3D_CUDA_CHECK(cudaMemset(d_out.data(), 0xAB, d_out.nbytes()));  // poison
  dev.closest_many(d_pts.data_as<float>(), n, static_cast<ClosestHit*>(d_out.data()));
  synchronize();
  std::vector<ClosestHit> gpu(n);
  S3D_CUDA_CHECK(cudaMemcpy(gpu.data(), d_out.data(), d_out.nbytes(), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(gpu[i].face, cpu[i].face) << "point " << i;
    ASSERT_EQ(std::memcmp(&gpu[i].distance, &cpu[i].distance, 4), 0) << "point " << i;
    ASSERT_EQ(std::memcmp(gpu[i].uvw, cpu[i].uvw, 12), 0) << "point " << i;
  }
}

TEST(MeshGpu, ClosestPointIsTheCpusBitForBit) {
  S3D_REQUIRE_CUDA();
  // Spheres of radius 0.4 with noise 0.03.
  expect_same_hits(uv_sphere(61, 97, 0.4f, 0.03f, 3), 100003, 0.6f, 5);  // near the surface
  expect_same_hits(uv_sphere(7, 11, 0.4f, 0.03f, 4), 4097, 3.0f, 6);  // far, a small tree
}

TEST(MeshGpu, NoPointsIsNoWork) {
  S3D_REQUIRE_CUDA();
  const Bvh bvh(uv_sphere(5, 7, 0.4f, 0.03f, 1));
  const DeviceBvh dev(bvh);
  dev.closest_many(nullptr, 0, nullptr);
  synchronize();
  EXPECT_EQ(dev.num_faces(), bvh.mesh().num_faces());
}

// The remesh on the GPU against the CPU sweep over the same tree. The GPU path poisons its
// output buffers (NaN positions, -1 indices) before its kernels write them.
void expect_same_remesh(const TriMesh& m, RemeshOptions o, const std::string& what,
                        bool empty = false) {
  Bvh bvh(m);
  o.use_device = false;
  RemeshStats cs, gs;
  const TriMesh cpu = remesh_narrow_band_dc(bvh, o, &cs);
  bvh.use_device();
  o.use_device = true;
  const TriMesh gpu = remesh_narrow_band_dc(bvh, o, &gs);
  EXPECT_EQ(cpu.num_faces() == 0, empty) << what;
  ASSERT_EQ(gpu.positions.size(), cpu.positions.size()) << what;
  ASSERT_EQ(gpu.faces, cpu.faces) << what;
  ASSERT_EQ(std::memcmp(gpu.positions.data(), cpu.positions.data(), 4 * cpu.positions.size()), 0)
      << what;
  EXPECT_EQ(gs.voxels, cs.voxels) << what;
  EXPECT_EQ(gs.grid_vertices, cs.grid_vertices) << what;
  EXPECT_EQ(gs.udf_queries, cs.udf_queries) << what;
}

TEST(MeshGpu, RemeshOnTheGpuIsTheCpusMesh) {
  S3D_REQUIRE_CUDA();
  // A noisy sphere and an off-centre torus in one mesh (two components, odd sizes).
  TriMesh m = uv_sphere(37, 53, 0.3f, 0.02f, 11);
  const TriMesh t = test::torus(0.17f, 0.05f, 41, 23, {0.1f, -0.12f, 0.07f});
  const int32_t base = static_cast<int32_t>(m.num_vertices());
  m.positions.insert(m.positions.end(), t.positions.begin(), t.positions.end());
  for (int32_t v : t.faces) m.faces.push_back(base + v);
  RemeshOptions o;
  o.center = {0.013f, -0.021f, 0.007f};
  o.scale = 0.93f;
  struct Case {
    int32_t resolution;
    float band, project_back;
  };
  for (const Case c : {Case{27, 1.0f, 0.0f}, Case{58, 1.3f, 0.0f}, Case{200, 1.0f, 0.0f},
                       Case{232, 2.5f, 0.6f}}) {
    o.resolution = c.resolution, o.band = c.band, o.project_back = c.project_back;
    expect_same_remesh(m, o, "resolution " + std::to_string(c.resolution));
  }
  // A band that misses the cube: empty on both.
  o.resolution = 64, o.band = 1, o.project_back = 0, o.center = {5, 5, 5};
  expect_same_remesh(m, o, "empty", true);
}

// The whole export with the closest points on the GPU gives the CPU's file, byte for byte.
TEST(MeshGpu, ExportOnTheGpuIsTheCpusFile) {
  S3D_REQUIRE_CUDA();
  const TriMesh s = uv_sphere(31, 45, 0.4f, 0.03f, 9);
  std::vector<float> pbr;
  for (int64_t v = 0; v < s.num_vertices(); ++v) {
    const Vec3 p = s.vertex(v);
    pbr.insert(pbr.end(), {0.5f + p[0], 0.5f + p[1], 0.5f + p[2], 0.3f, 0.6f, 1.0f});
  }
  const sparse3d::GlbAsset a =
      sparse3d::voxelize_textured_mesh(s.positions, s.faces, pbr, 6, 96, "gpu test sphere");
  for (bool remesh : {false, true}) {
    sparse3d::GlbOptions o;
    o.decimation_target = 5003;
    o.texture_size = 257;
    o.remesh = remesh;
    o.remesh_project = 0.5f;
    o.use_gpu = false;
    const sparse3d::TexturedMesh cpu = sparse3d::to_glb(a.view(), o);
    o.use_gpu = true;
    const sparse3d::TexturedMesh gpu = sparse3d::to_glb(a.view(), o);
    EXPECT_TRUE(gpu.fallbacks().empty());
    EXPECT_EQ(cpu.glb_bytes(sparse3d::TextureFormat::PNG),
              gpu.glb_bytes(sparse3d::TextureFormat::PNG)) << "remesh " << remesh;
  }
}

}  // namespace
}  // namespace s3d::mesh
