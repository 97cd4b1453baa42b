// The whole model and sampler on the GPU against the CPU backend (tiny preset, several
// assets of odd sizes), and the two CFG modes on the GPU against each other.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/rng.h"
#include "model/checkpoint.h"
#include "model/slat_flow.h"
#include "payload/generate.h"
#include "sampler/sampler.h"
#include "../model_inputs.h"
#include "../test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

using testing::rel_l2;

sampler::Inputs make_inputs(const std::vector<int64_t>& counts, int L, int Cc, uint64_t seed) {
  return testing::synthetic_inputs(counts, L, Cc, 32, seed);
}

struct ModelGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_model_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json")) make_checkpoint(preset("tiny"), 5, dir + "/tiny", DType::BF16);
  }
  std::string dir;
};

TEST_F(ModelGpu, ForwardMatchesTheCpuBackend) {
  SLatFlowModel cpu(load_checkpoint(dir + "/tiny.json", Device::CPU));
  SLatFlowModel gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = make_inputs({1, 7, 333}, 13, 64, 21);
  Tensor t = Tensor::from_floats({1000.0f, 640.0f, 10.0f}, {3}, DType::F32);
  Request rc = cpu.prepare(in.coords, 3, 13);
  Request rg = gpu.prepare(in.coords, 3, 13);
  auto ref = cpu.forward(rc, in.noise, t, in.cond).to_floats();
  Tensor cond_d = in.cond.to(Device::CUDA);
  auto got = gpu.forward(rg, in.noise.to(Device::CUDA), t.to(Device::CUDA), cond_d).to_floats();
  double err = rel_l2(got, ref);
  std::printf("tiny forward, GPU vs CPU: rel L2 %.3e\n", err);
  EXPECT_LT(err, 1e-2);
}

TEST_F(ModelGpu, SamplerSerialAndBatchedMatchTheCpuBackend) {
  SLatFlowModel cpu(load_checkpoint(dir + "/tiny.json", Device::CPU));
  SLatFlowModel gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = make_inputs({257}, 29, 64, 31);
  sampler::SamplerOptions o;
  o.steps = 4;
  o.guidance_rescale = 0.3;
  auto ref = sampler::sample(cpu, in, o).latent.to_floats();
  auto serial = sampler::sample(gpu, in, o).latent.to_floats();
  o.batched_cfg = true;
  auto batched = sampler::sample(gpu, in, o).latent.to_floats();
  double e_serial = rel_l2(serial, ref), e_batched = rel_l2(batched, ref),
         e_modes = rel_l2(batched, serial);
  std::printf("tiny 4-step latents: serial vs CPU %.3e, batched vs CPU %.3e, batched vs serial %.3e\n",
              e_serial, e_batched, e_modes);
  EXPECT_LT(e_serial, 3e-2);
  EXPECT_LT(e_batched, 3e-2);
  EXPECT_LT(e_modes, 3e-2);
}

TEST_F(ModelGpu, ForwardLaunchesAreCountedAndRepeatable) {
  SLatFlowModel gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = make_inputs({100}, 8, 64, 41);
  Request r = gpu.prepare(in.coords, 1, 8);
  Tensor t = Tensor::from_floats({500.0f}, {1}, DType::F32).to(Device::CUDA);
  Tensor x = in.noise.to(Device::CUDA), cond = in.cond.to(Device::CUDA);
  gpu.forward(r, x, t, cond);  // warm-up: graph and algorithm caches
  synchronize();
  reset_launch_counts();
  auto a = gpu.forward(r, x, t, cond).to_floats();
  LaunchCounts first = launch_counts();
  reset_launch_counts();
  auto b = gpu.forward(r, x, t, cond).to_floats();
  LaunchCounts second = launch_counts();
  EXPECT_GT(first.total, 50u);
  EXPECT_EQ(first.total, second.total);
  EXPECT_EQ(first.by_op.at("sdpa"), 2u * 2u);  // 2 blocks x (self + cross)
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "run-to-run difference at " << i;
}

// Multi-asset batching on the GPU: two assets packed into one request against each run
// alone. GEMMs see another M, so the contract is a tolerance (the CPU backend is bitwise:
// tests/cpu/test_multi_asset.cpp): latent rel L2 <= 1e-2 per asset, no non-finite value.
TEST_F(ModelGpu, PackedAssetsStayCloseToEachRunAlone) {
  SLatFlowModel gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  const auto a = make_inputs({333}, 8, 64, 51), b = make_inputs({1001}, 8, 64, 52);
  for (bool batched : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 3;
    o.batched_cfg = batched;
    const auto alone_a = sampler::sample(gpu, a, o).latent.to_floats();
    const auto alone_b = sampler::sample(gpu, b, o).latent.to_floats();
    const Tensor packed = sampler::sample(gpu, sampler::pack({a, b}), o).latent;
    const auto pa = packed.rows(0, 333).to_floats(), pb = packed.rows(333, 1334).to_floats();
    const double ea = rel_l2(pa, alone_a), eb = rel_l2(pb, alone_b);
    std::printf("packed vs alone (%s CFG): asset a %.3e, asset b %.3e\n",
                batched ? "batched" : "serial", ea, eb);
    EXPECT_LE(ea, 1e-2);
    EXPECT_LE(eb, 1e-2);
    for (float v : pa) ASSERT_TRUE(std::isfinite(v));
    for (float v : pb) ASSERT_TRUE(std::isfinite(v));
  }
}

// step_tables on the GPU: the same ops at the same shapes, so the same bits (the CPU test
// covers every path and schedule); fewer launches per loop in serial CFG (one modulation per
// step instead of one per forward).
TEST_F(ModelGpu, StepTablesAreBitwiseAndLaunchLess) {
  SLatFlowModel gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  const auto in = make_inputs({333, 77}, 8, 64, 53);
  for (bool batched : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 3;
    o.batched_cfg = batched;
    sampler::sample(gpu, in, o);  // warm-up
    synchronize();
    reset_launch_counts();
    const Tensor ref = sampler::sample(gpu, in, o).latent;
    const uint64_t without = launch_counts().total;
    o.step_tables = true;
    reset_launch_counts();
    const Tensor got = sampler::sample(gpu, in, o).latent;
    const uint64_t with = launch_counts().total;
    std::printf("step_tables (%s CFG): %llu launches per run, %llu without\n",
                batched ? "batched" : "serial", static_cast<unsigned long long>(with),
                static_cast<unsigned long long>(without));
    const auto a = ref.to_floats(), b = got.to_floats();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "element " << i;
    if (batched) {
      EXPECT_EQ(with, without);  // one forward per step either way: the work only moves
    } else {
      EXPECT_LT(with, without);
    }
  }
}

}  // namespace
}  // namespace s3d::model
