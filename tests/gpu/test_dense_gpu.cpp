// The dense family (SparseStructureFlowModel) on the GPU: the dense forward and loop against
// the CPU backend, and every execution path against pure_eager, in the volume and the token
// layouts. The family's kernels (the volume <-> token transposes, the unbiased std) run on
// both backends, the GPU's against the CPU's, in tests/device/test_dense_model.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/cuda_util.h"
#include "kernels/volume_layout.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/family.h"
#include "sampler/sampler.h"
#include "sparse3d/engine.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;
using testing::rel_l2;
using testing::random_tensor;

struct DenseGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_dense_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/ss.json")) make_checkpoint(preset("tiny-ss"), 5, dir + "/ss", DType::BF16);
  }
  std::string dir;
};

TEST_F(DenseGpu, ForwardAndLoopMatchTheCpuBackend) {
  Transformer cpu(load_checkpoint(dir + "/ss.json", Device::CPU));
  Transformer gpu(load_checkpoint(dir + "/ss.json", Device::CUDA));
  EXPECT_TRUE(testing::bitwise_equal(cpu.prepare(grid_coords(1, 8), 1, 19).rope_cos,
                                     gpu.prepare(grid_coords(1, 8), 1, 19).rope_cos.to(Device::CPU)));
  const int B = 3;
  sampler::Inputs in;
  in.batch = B;
  in.coords = grid_coords(B, 8);
  in.cond = random_tensor({B, 19, 64}, DType::BF16, 3);
  in.noise = random_tensor({B * 512, 8}, DType::F32, 4);
  Tensor t = Tensor::from_floats({1000.0f, 640.0f, 10.0f}, {B}, DType::F32);
  auto ref = cpu.forward(cpu.prepare(in.coords, B, 19), in.noise, t, in.cond).to_floats();
  auto got = gpu.forward(gpu.prepare(in.coords, B, 19), in.noise.to(Device::CUDA),
                         t.to(Device::CUDA), in.cond.to(Device::CUDA))
                 .to_floats();
  const double e_fwd = rel_l2(got, ref);
  sampler::SamplerOptions o(sparse3d::SamplerSettings{4, 5.0, 7.5, 0.0, 1.0, 0.7, 1e-5}, {});
  auto lref = sampler::sample(cpu, in, o).latent.to_floats();
  auto lgot = sampler::sample(gpu, in, o).latent.to_floats();
  const double e_lat = rel_l2(lgot, lref);
  std::printf("tiny-ss GPU vs CPU: forward rel L2 %.3e, 4-step latent (rescale 0.7) %.3e\n",
              e_fwd, e_lat);
  EXPECT_LT(e_fwd, 1e-2);
  EXPECT_LT(e_lat, 3e-2);
}

sparse3d::TensorView view_of(Tensor& t) {
  return sparse3d::TensorView{t.data(), t.dtype(), t.device(), 0, t.shape()};
}

TEST_F(DenseGpu, EveryPathStaysWithinTheLatentToleranceOfPureEager) {
  const int B = 2;
  Tensor cond = random_tensor({B, 37, 64}, DType::BF16, 11);
  Tensor coords = grid_coords(B, 8);
  std::vector<float> reference;
  for (const auto& p : sparse3d::execution_paths()) {
    for (bool with_coords : {false, true}) {
      sparse3d::EngineOptions o;
      o.path = std::string(p.name);
      o.persist_qualification = false;
      sparse3d::Engine e(dir + "/ss.json", o);
      sparse3d::SampleRequest r;
      r.batch = B;
      r.cond = view_of(cond);
      r.seed = 5;
      // The released sparse-structure settings (docs/DENSE_MODEL.md), 12 steps.
      r.sampler = sparse3d::SamplerSettings::released_sparse_structure();
      if (with_coords) r.coords = view_of(coords);
      sparse3d::SampleResult res = e.sample(r);
      std::vector<float> lat = res.latent.to_floats();
      if (with_coords) {  // tokens: compare as the volume
        Tensor tok = Tensor::from_floats(lat, {B * 512, 8}, DType::F32);
        Tensor vol = Tensor::empty({B, 8, 8, 8, 8}, DType::F32, Device::CPU);
        kernels::tokens_to_volume(tok, vol);
        lat = vol.to_floats();
      }
      if (reference.empty()) reference = lat;
      const double err = rel_l2(lat, reference);
      std::printf("tiny-ss %-28s %-6s latent vs pure_eager rel L2 %.3e, fallbacks %zu\n",
                  std::string(p.name).c_str(), with_coords ? "tokens" : "volume", err,
                  e.counters().fallbacks.size());
      EXPECT_LT(err, 3e-2) << p.name;
      if (p.name == "pure_eager") {
        EXPECT_EQ(err, 0.0) << "volume and token layouts differ";
      }
    }
  }
}

}  // namespace
}  // namespace s3d::model
