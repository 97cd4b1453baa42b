// The GLB export's CUDA stages against their CPU references, on random odd-sized inputs into
// poisoned outputs: the BVH's closest-point queries (through a copy of the CPU's tree and
// through the tree built on the device), the remesh and the bake's surface samples, bit for
// bit.
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
#include "mesh/bake_cuda.h"
#include "mesh/bvh.h"
#include "mesh/bvh_cuda.h"
#include "mesh/remesh.h"
#include "sparse3d/glb.h"

namespace s3d::mesh {
namespace {

using test::uv_sphere;

// The CPU tree's answers against the device's, through a copy of the CPU tree or through the
// linear BVH built on the device.
void expect_same_hits(const TriMesh& m, int64_t n, float spread, uint32_t seed,
                      BvhBuild build = BvhBuild::host) {
  const Bvh bvh(m);
  const Bvh device_built(m, BvhBuild::device);
  const DeviceBvh copied(bvh);
  const DeviceBvh& dev = build == BvhBuild::host ? copied : *device_built.device();
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

// A single face, two leaves, an odd count, duplicated faces (ties go to the lower index),
// spheres near and far: the linear BVH built on the device answers as the CPU tree.
TEST(MeshGpu, TreeBuiltOnTheDeviceAnswersAsTheCpus) {
  S3D_REQUIRE_CUDA();
  TriMesh one;
  one.positions = {0.1f, 0.2f, 0.3f, 0.9f, 0.1f, 0.2f, 0.3f, 0.8f, 0.5f};
  one.faces = {0, 1, 2};
  expect_same_hits(one, 1001, 2.0f, 1, BvhBuild::device);
  TriMesh five = uv_sphere(3, 4, 0.4f, 0.0f, 2);
  five.faces.resize(15);
  expect_same_hits(five, 777, 1.0f, 2, BvhBuild::device);
  TriMesh twice = uv_sphere(9, 13, 0.4f, 0.02f, 3);
  const size_t half = twice.faces.size();
  for (size_t i = 0; i < half; ++i) twice.faces.push_back(twice.faces[i]);
  expect_same_hits(twice, 5003, 0.8f, 3, BvhBuild::device);
  TriMesh stacked = one;  // 3001 faces on one triangle: one Morton code, the tree by index
  for (int i = 1; i < 3001; ++i) stacked.faces.insert(stacked.faces.end(), {0, 1, 2});
  expect_same_hits(stacked, 2003, 1.5f, 4, BvhBuild::device);
  expect_same_hits(uv_sphere(61, 97, 0.4f, 0.03f, 3), 100003, 0.6f, 5, BvhBuild::device);
  expect_same_hits(uv_sphere(7, 11, 0.4f, 0.03f, 4), 4097, 3.0f, 6, BvhBuild::device);
}

// Built on the device, the tree answers CPU queries only after build_host_tree().
TEST(MeshGpu, HostQueriesOfADeviceTreeNeedTheHostTree) {
  S3D_REQUIRE_CUDA();
  Bvh bvh(uv_sphere(11, 17, 0.4f, 0.02f, 7), BvhBuild::device);
  EXPECT_TRUE(bvh.on_device());
  EXPECT_FALSE(bvh.has_host_tree());
  EXPECT_THROW(bvh.closest({0.f, 0.f, 0.f}), s3d::Error);
  bvh.build_host_tree();
  const Bvh reference(bvh.mesh());
  const ClosestHit a = bvh.closest({0.1f, 0.5f, -0.2f}), b = reference.closest({0.1f, 0.5f, -0.2f});
  EXPECT_EQ(a.face, b.face);
  EXPECT_EQ(std::memcmp(&a.distance, &b.distance, 4), 0);
}

// The bake's surface samples on the device (closest point, projection, volume sample in one
// kernel) against the CPU's steps: closest_many, the same projection, sample_trilinear.
TEST(MeshGpu, SurfaceSamplesOnTheDeviceAreTheCpus) {
  S3D_REQUIRE_CUDA();
  const TriMesh m = uv_sphere(23, 31, 0.4f, 0.03f, 8);
  const Bvh bvh(m, BvhBuild::device);
  Bvh host(m);
  std::mt19937 rng(9);
  const int32_t R = 37, C = 5;
  std::vector<int32_t> coords;
  std::vector<float> attrs;
  std::uniform_real_distribution<float> a(-2.0f, 3.0f);
  std::bernoulli_distribution keep(0.55);
  for (int32_t x = 0; x < R; ++x)
    for (int32_t y = 0; y < R; ++y)
      for (int32_t z = 0; z < R; ++z)
        if (keep(rng)) {
          coords.insert(coords.end(), {x, y, z});
          for (int32_t c = 0; c < C; ++c) attrs.push_back(a(rng));
        }
  const SparseVolume volume(coords, attrs, C, {R, R, R});
  const DeviceVolume dev_volume(volume);
  const float origin[3] = {-0.5f, -0.5f, -0.5f}, voxel[3] = {1.0f / R, 1.0f / R, 1.0f / R};
  const int64_t n = 30011;
  std::uniform_real_distribution<float> u(-0.7f, 0.7f);
  std::vector<float> pts(3 * n);
  for (auto& x : pts) x = u(rng);
  std::vector<float> gpu(C * n, std::nanf(""));  // poison
  sample_surface_on_device(*bvh.device(), dev_volume, origin, voxel, pts.data(), n, gpu.data());
  std::vector<ClosestHit> hits(n);
  host.closest_many(pts.data(), n, hits.data());
  std::vector<float> grid(3 * n), cpu(C * n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* tri = &m.faces[3 * hits[i].face];
    for (int k = 0; k < 3; ++k) {
      const float q = hits[i].uvw[0] * m.positions[3 * tri[0] + k] +
                      hits[i].uvw[1] * m.positions[3 * tri[1] + k] +
                      hits[i].uvw[2] * m.positions[3 * tri[2] + k];
      grid[3 * i + k] = (q - origin[k]) / voxel[k];
    }
  }
  volume.sample_trilinear(grid.data(), n, cpu.data());
  ASSERT_EQ(std::memcmp(gpu.data(), cpu.data(), 4 * cpu.size()), 0);
  sample_surface_on_device(*bvh.device(), dev_volume, origin, voxel, nullptr, 0, nullptr);
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
  const TriMesh device_built = remesh_narrow_band_dc(Bvh(m, BvhBuild::device), o);
  ASSERT_EQ(device_built.faces, gpu.faces) << what << " (the tree built on the device)";
  ASSERT_EQ(device_built.positions, gpu.positions) << what << " (the tree built on the device)";
  EXPECT_EQ(cpu.num_faces() == 0, empty) << what;
  ASSERT_EQ(gpu.positions.size(), cpu.positions.size()) << what;
  ASSERT_EQ(gpu.faces, cpu.faces) << what;
  ASSERT_EQ(std::memcmp(gpu.positions.data(), cpu.positions.data(), 4 * cpu.positions.size()), 0)
      << what;
  EXPECT_EQ(gs.voxels, cs.voxels) << what;
  EXPECT_EQ(gs.grid_vertices, cs.grid_vertices) << what;
  EXPECT_EQ(gs.udf_queries, cs.udf_queries) << what;
  EXPECT_EQ(gs.cavity_quads, cs.cavity_quads) << what;
  EXPECT_EQ(gs.cavities_kept_all, cs.cavities_kept_all) << what;
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
                       Case{232, 2.5f, 0.6f}})
    for (bool drop : {false, true}) {
      o.resolution = c.resolution, o.band = c.band, o.project_back = c.project_back;
      o.drop_cavities = drop;  // the sphere's and the torus's inner shells
      expect_same_remesh(m, o, "resolution " + std::to_string(c.resolution) +
                                   (drop ? ", cavities dropped" : ""));
    }
  // A band that misses the cube: empty on both.
  o.resolution = 64, o.band = 1, o.project_back = 0, o.center = {5, 5, 5};
  expect_same_remesh(m, o, "empty", true);
  // A cube as large as the grid: the fill reaches no quad, so every one stays, on both.
  const TriMesh cube = test::box_mesh({-0.5f, -0.5f, -0.5f}, {0.5f, 0.5f, 0.5f});
  o.center = {0, 0, 0}, o.scale = 1;
  expect_same_remesh(cube, o, "cube filling the grid");
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
  for (int run = 0; run < 3; ++run) {
    const bool remesh = run > 0;
    sparse3d::GlbOptions o;
    o.decimation_target = 5003;
    o.texture_size = 257;
    o.remesh = remesh;
    o.remesh_drop_cavities = run == 2;
    o.remesh_project = 0.5f;
    o.use_gpu = false;
    const sparse3d::TexturedMesh cpu = sparse3d::to_glb(a.view(), o);
    o.use_gpu = true;
    const sparse3d::TexturedMesh gpu = sparse3d::to_glb(a.view(), o);
    // Nothing falls back, the cavity fill included (its GPU path gives the CPU's bits).
    EXPECT_TRUE(gpu.fallbacks().empty()) << "run " << run;
    EXPECT_EQ(cpu.glb_bytes(sparse3d::TextureFormat::PNG),
              gpu.glb_bytes(sparse3d::TextureFormat::PNG)) << "run " << run;
  }
}

}  // namespace
}  // namespace s3d::mesh
