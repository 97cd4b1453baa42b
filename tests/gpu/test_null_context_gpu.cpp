// Null-context elimination and the condition K/V cache on the GPU: after
// qualification, every path's denoiser outputs and final latents are
// bitwise equal (int32 view of the fp32 outputs) to pure_eager, in serial and batched CFG:
//   - full-size blocks (C = 1536, H = 12, D = 128, cond 1024 x L = 4101, 2 blocks) at 3,664
//     and 30,227 tokens;
//   - the full 30-block checkpoint when SPARSE3D_FULL_CKPT (NAME.json) and
//     SPARSE3D_FULL_MANIFEST name one (skipped, with the reason, otherwise);
// and broadcast_row against its CPU version. The tiny preset's every path and the forced
// qualification failure (full-size blocks here) run in tests/device/test_null_context.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "core/rng.h"
#include "kernels/elementwise.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "payload/payload.h"
#include "sampler/sampler.h"
#include "full_checkpoint.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "test_numerics.h"

namespace s3d::model {
namespace {

namespace fs = std::filesystem;

#define S3D_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: run on the GPU machine"

std::string work_dir() {
  fs::path p = fs::temp_directory_path() / ("sparse3d_null_gpu_" + std::to_string(getpid()));
  fs::create_directories(p);
  return p.string();
}

TEST(NullContextGpu, BroadcastRowMatchesTheCpuBits) {
  S3D_REQUIRE_GPU();
  for (DType dt : {DType::BF16, DType::F32}) {
    for (int64_t C : {8, 1536, 13}) {
      Tensor row = testing::random_tensor({1, C}, dt, 3);
      Tensor cpu = Tensor::empty({777, C}, dt, Device::CPU);
      Tensor gpu = Tensor::empty({777, C}, dt, Device::CUDA);
      gpu.poison();
      Tensor gpu_slice = gpu.rows(100, 777), cpu_slice = cpu.rows(100, 777);
      kernels::broadcast_row(row, cpu_slice);
      kernels::broadcast_row(row.to(Device::CUDA), gpu_slice);
      EXPECT_TRUE(testing::same_bits(cpu_slice, gpu_slice, "broadcast_row")) << C;
      EXPECT_EQ(testing::count_poisoned(gpu.rows(0, 100)), 100 * C);
    }
  }
}

// Full-size blocks (the trellis2-shape-1024 block shapes), 2 of them, at the benchmark's token
// counts: the GEMM shapes qualification and the fast paths see on the full model.
TEST(NullContextGpu, FullSizeBlocksAt3664And30227TokensBitwise) {
  S3D_REQUIRE_GPU();
  contract::reset_fallbacks();
  const std::string dir = work_dir();
  ModelConfig c = preset("trellis2-shape-1024");
  c.num_blocks = 2;
  make_checkpoint(c, 11, dir + "/full2", DType::BF16);
  Transformer m(load_checkpoint(dir + "/full2.json", Device::CUDA));
  const int L = 4101;
  NullContext nc = NullContext::build(m, testing::qualified_options(L, {3664, 30227}));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  sampler::SamplerOptions o;
  o.steps = testing::env_int("SPARSE3D_NULL_STEPS", 3);
  for (int64_t tokens : {3664, 30227}) {
    auto in = testing::synthetic_inputs({tokens}, L, c.cond_channels, c.out_channels, 7);
    testing::expect_every_path_bitwise(m, in, o, nc,
                                       "full-size blocks, " + std::to_string(tokens) + " tokens");
  }
  testing::report_qualification(nc, "full2");
  fs::remove_all(dir);
}

// The full 30-block preset on real payload files, 15 protocol steps (SPARSE3D_FULL_STEPS).
// Assets: SPARSE3D_FULL_ASSETS (comma-separated names), else those of 3,664 and 30,227
// tokens, else the smallest and the largest.
TEST(NullContextGpu, FullCheckpointEveryPathBitwise) {
  S3D_REQUIRE_GPU();
  const testing::FullCheckpoint full = testing::full_checkpoint();
  if (!full.missing.empty()) GTEST_SKIP() << full.missing;
  contract::reset_fallbacks();
  Transformer m(load_checkpoint(full.checkpoint, Device::CUDA));
  payload::Manifest man = payload::read_manifest(full.manifest);
  const auto picked = testing::full_assets(man);
  ASSERT_FALSE(picked.empty()) << full.manifest << " has no assets";
  std::vector<int64_t> tokens;
  for (const auto* e : picked) tokens.push_back(e->tokens);
  NullContext nc = NullContext::build(m, testing::qualified_options(man.cond_tokens, tokens));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  sampler::SamplerOptions o = sampler::SamplerOptions::protocol();
  o.steps = testing::env_int("SPARSE3D_FULL_STEPS", 15);
  std::printf("[full] %d steps\n", o.steps);
  for (const auto* e : picked)
    testing::expect_every_path_bitwise(m, testing::asset_inputs(man, *e, m.config().out_channels),
                                       o, nc, e->name);
  testing::report_qualification(nc, "full");
}

}  // namespace
}  // namespace s3d::model
