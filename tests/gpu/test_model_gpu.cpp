// The whole model and sampler on the GPU against the CPU backend (tiny preset, several
// assets of odd sizes), the two CFG modes on the GPU against each other, packed assets, and
// the step tables. The forward's finiteness, repeatability and launch counts run in
// tests/device/test_model.cpp (on both backends).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/rng.h"
#include "model/checkpoint.h"
#include "model/trunk/transformer.h"
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
  Transformer cpu(load_checkpoint(dir + "/tiny.json", Device::CPU));
  Transformer gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
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
  Transformer cpu(load_checkpoint(dir + "/tiny.json", Device::CPU));
  Transformer gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = make_inputs({257}, 29, 64, 31);
  sampler::SamplerOptions o;
  o.steps = 4;
  o.guidance_rescale = 0.3;
  auto ref = sampler::sample(cpu, in, o).latent.to_floats();
  auto serial = sampler::sample(gpu, in, o).latent.to_floats();
  o.flags.set(sparse3d::Flag::batched_cfg, true);
  auto batched = sampler::sample(gpu, in, o).latent.to_floats();
  double e_serial = rel_l2(serial, ref), e_batched = rel_l2(batched, ref),
         e_modes = rel_l2(batched, serial);
  std::printf("tiny 4-step latents: serial vs CPU %.3e, batched vs CPU %.3e, batched vs serial %.3e\n",
              e_serial, e_batched, e_modes);
  EXPECT_LT(e_serial, 3e-2);
  EXPECT_LT(e_batched, 3e-2);
  EXPECT_LT(e_modes, 3e-2);
}

// Multi-asset batching on the GPU: two assets packed into one request against each run
// alone. GEMMs see another M, so the contract is a tolerance (the CPU backend is bitwise:
// tests/cpu/test_multi_asset.cpp): latent rel L2 <= 1e-2 per asset, no non-finite value.
TEST_F(ModelGpu, PackedAssetsStayCloseToEachRunAlone) {
  Transformer gpu(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  const auto a = make_inputs({333}, 8, 64, 51), b = make_inputs({1001}, 8, 64, 52);
  for (bool batched : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 3;
    o.flags.set(sparse3d::Flag::batched_cfg, batched);
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

// bf16 bits as a monotone integer line (the distance between two is their ulp distance).
int32_t bf16_line(uint16_t b) {
  return (b & 0x8000) ? -static_cast<int32_t>(b & 0x7fff) : static_cast<int32_t>(b);
}

// step_tables on the GPU. The table is computed for the whole schedule in one call (the three
// t-side fp32 GEMMs at M = steps x 2B, not B or 2B as in each forward), so cuBLASLt may sum
// in another order: measured on the H200 (2026-11-29), 126 of 1,658,880 elements of the
// full-width table differ, by up to 8 bf16 ulp (where the sum of the shared and the block's
// modulation nearly cancels). Contract: per step and block, relative L2 against the
// forward's own modulation <= 2^-8 (bf16's rounding unit); the test prints the counts. At
// the full preset's widths (C 1536, 2 blocks) and at the tiny preset's.
TEST_F(ModelGpu, StepTablesStayWithinTheirToleranceOfTheForwardsModulation) {
  ModelConfig full = preset("trellis2-shape-1024");
  full.num_blocks = 2;
  make_checkpoint(full, 17, dir + "/full2", DType::BF16);
  for (const char* name : {"tiny", "full2"}) {
    SCOPED_TRACE(name);
    Transformer gpu(load_checkpoint(dir + "/" + name + ".json", Device::CUDA));
    const int steps = 15, rows = 4;  // 2B for B = 2
    std::vector<float> t;
    for (double v : sampler::timesteps(steps, 3.0)) {
      if (t.size() == static_cast<size_t>(steps * rows)) break;
      for (int r = 0; r < rows; ++r) t.push_back(static_cast<float>(1000.0 * v));
    }
    const Tensor t_all = Tensor::from_floats(t, {steps, rows}, DType::F32).to(Device::CUDA);
    const ModulationTable table = gpu.modulation_table(ops::OpPlan(), t_all);
    int64_t differ = 0, total = 0, worst_ulp = 0;
    double worst_rel = 0;
    for (int k = 0; k < steps; ++k)
      for (int used : {rows / 2, rows}) {
        const Modulation mine =
            gpu.modulation(ops::OpPlan(), t_all.rows(k, k + 1).reshape({rows}).rows(0, used));
        const Modulation got = table.step(k, used);
        ASSERT_EQ(got.blocks.size(), mine.blocks.size());
        for (size_t i = 0; i < mine.blocks.size(); ++i) {
          const Tensor a = mine.blocks[i].to(Device::CPU), b = got.blocks[i].to(Device::CPU);
          ASSERT_EQ(a.numel(), b.numel());
          for (int64_t e = 0; e < a.numel(); ++e) {
            const int64_t d = std::abs(bf16_line(a.data_as<uint16_t>()[e]) -
                                       bf16_line(b.data_as<uint16_t>()[e]));
            differ += d != 0;
            worst_ulp = std::max(worst_ulp, d);
            ++total;
          }
          const double rel = rel_l2(b.to_floats(), a.to_floats());
          worst_rel = std::max(worst_rel, rel);
          EXPECT_LE(rel, 1.0 / 256) << "step " << k << ", block " << i << ", " << used << " rows";
        }
      }
    std::printf("step_tables (%s): %lld of %lld modulation elements differ from the forward's "
                "own, by at most %lld ulp; worst relative L2 per step and block %.3e\n",
                name, static_cast<long long>(differ), static_cast<long long>(total),
                static_cast<long long>(worst_ulp), worst_rel);
  }
}

// And the loop: fewer launches (one modulation per request instead of one per forward); the
// final latent within 1e-2 relative L2 of the per-forward modulation's, printed with the
// count of differing elements (bitwise at the tiny widths). At the full preset's widths
// (2 blocks), 15 steps, 1,001 and 77 tokens.
TEST_F(ModelGpu, StepTablesLaunchLessAndKeepTheLatent) {
  ModelConfig full = preset("trellis2-shape-1024");
  full.num_blocks = 2;
  make_checkpoint(full, 17, dir + "/full2", DType::BF16);
  Transformer gpu(load_checkpoint(dir + "/full2.json", Device::CUDA));
  const auto in = testing::synthetic_inputs({1001, 77}, 64, full.cond_channels, full.out_channels, 53);
  for (bool batched : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 15;
    o.flags.set(sparse3d::Flag::batched_cfg, batched);
    sampler::sample(gpu, in, o);  // warm-up
    synchronize();
    reset_launch_counts();
    const Tensor ref = sampler::sample(gpu, in, o).latent;
    const uint64_t without = launch_counts().total;
    o.flags.set(sparse3d::Flag::step_tables, true);
    reset_launch_counts();
    const Tensor got = sampler::sample(gpu, in, o).latent;
    const uint64_t with = launch_counts().total;
    const auto a = ref.to_floats(), b = got.to_floats();
    ASSERT_EQ(a.size(), b.size());
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    const double err = rel_l2(b, a);
    std::printf("step_tables (%s CFG): %llu launches per run, %llu without; latent: %lld of %zu "
                "differ, rel L2 %.3e\n",
                batched ? "batched" : "serial", static_cast<unsigned long long>(with),
                static_cast<unsigned long long>(without), static_cast<long long>(differ),
                a.size(), err);
    EXPECT_LE(err, 1e-2);
    EXPECT_LT(with, without);
  }
}

}  // namespace
}  // namespace s3d::model
