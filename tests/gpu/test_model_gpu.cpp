// The whole model and sampler on the GPU against the CPU backend (tiny preset, several
// assets of odd sizes), and the two CFG modes on the GPU against each other.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/rng.h"
#include "model/checkpoint.h"
#include "model/slat_flow.h"
#include "payload/generate.h"
#include "sampler/sampler.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

sampler::Inputs make_inputs(const std::vector<int64_t>& counts, int L, int Cc, uint64_t seed) {
  sampler::Inputs in;
  in.batch = static_cast<int>(counts.size());
  int64_t T = 0;
  for (auto n : counts) T += n;
  in.coords = Tensor::empty({T, 4}, DType::I32, Device::CPU);
  int64_t row = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    Tensor one = payload::voxelize_surface(static_cast<int>(b), counts[b], 64, seed + b);
    for (int64_t i = 0; i < 4 * counts[b]; ++i) {
      int32_t v = one.data_as<int32_t>()[i];
      in.coords.data_as<int32_t>()[4 * row + i] = (i % 4 == 0) ? static_cast<int32_t>(b) : v;
    }
    row += counts[b];
  }
  std::vector<float> cond(static_cast<size_t>(in.batch) * L * Cc);
  normal_fill(seed ^ 0x99, 0, cond.size(), cond.data());
  in.cond = Tensor::from_floats(cond, {in.batch, L, Cc}, DType::BF16);
  in.noise = Tensor::empty({T, 32}, DType::F32, Device::CPU);
  normal_fill(seed, 0, static_cast<uint64_t>(in.noise.numel()), in.noise.data_as<float>());
  return in;
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

}  // namespace
}  // namespace s3d::model
