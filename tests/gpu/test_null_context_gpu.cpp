// Null-context elimination and the condition K/V cache on the GPU: after
// qualification, every path's denoiser outputs and final latents are
// bitwise equal (int32 view of the fp32 outputs) to pure_eager, in serial and batched CFG:
//   - the tiny preset;
//   - full-size blocks (C = 1536, H = 12, D = 128, cond 1024 x L = 4101, 2 blocks) at 3,664
//     and 30,227 tokens;
//   - the full 30-block checkpoint when SPARSE3D_FULL_CKPT (NAME.json) and
//     SPARSE3D_FULL_MANIFEST name one (skipped, with the reason, otherwise);
// and a forced qualification failure (a deliberately wrong cached row) that takes the
// fallback, counts and reports it, and still gives pure_eager's bits.
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

NullContextOptions qualified(int L, std::vector<int64_t> tokens) {
  return testing::qualified_options(L, std::move(tokens));
}

// Runs every spec against pure_eager (per CFG mode) on the inputs, bitwise.
void check_all_paths(const Transformer& m, const sampler::Inputs& in,
                     const sampler::SamplerOptions& o, const NullContext& nc,
                     const std::string& label) {
  sampler::Output ref[2] = {testing::reference_run(m, in, o, false),
                            testing::reference_run(m, in, o, true)};
  for (const auto& spec : testing::null_context_specs()) {
    SCOPED_TRACE(label + " " + spec);
    testing::expect_same_bits_as(ref[testing::spec_is_batched(spec) ? 1 : 0], m, in, o, spec, &nc);
  }
}

// The qualification outcome as the bench report will quote it, and which path ran.
void report(const NullContext& nc, const std::string& label) {
  std::printf("[%s] %s", label.c_str(), nc.report().c_str());
  std::printf("[%s] fallbacks:\n%s", label.c_str(),
              contract::format_fallbacks(contract::fallback_counts()).c_str());
  ::testing::Test::RecordProperty(label + "_qualified_m", std::to_string(nc.qualification().m));
  // A cache that did not qualify must have been refused and counted, never used silently.
  if (nc.qualification().m == 0) {
    bool counted = false;
    for (const auto& f : contract::fallback_counts())
      counted |= f.optimization == "null_context_cache";
    EXPECT_TRUE(counted) << label << ": the cache did not qualify, but no fallback was counted";
  }
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

TEST(NullContextGpu, TinyPresetEveryPathBitwise) {
  S3D_REQUIRE_GPU();
  contract::reset_fallbacks();
  const std::string dir = work_dir();
  make_checkpoint(preset("tiny"), 5, dir + "/tiny", DType::BF16);
  Transformer m(load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = testing::synthetic_inputs({257, 31}, 29, m.config().cond_channels, 32, 31);
  NullContext nc = NullContext::build(m, qualified(29, {288}));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  sampler::SamplerOptions o;
  o.steps = 4;
  o.guidance_rescale = 0.3;
  check_all_paths(m, in, o, nc, "tiny");
  report(nc, "tiny");
  fs::remove_all(dir);
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
  NullContext nc = NullContext::build(m, qualified(L, {3664, 30227}));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  sampler::SamplerOptions o;
  o.steps = testing::env_int("SPARSE3D_NULL_STEPS", 3);
  for (int64_t tokens : {3664, 30227}) {
    auto in = testing::synthetic_inputs({tokens}, L, c.cond_channels, c.out_channels, 7);
    check_all_paths(m, in, o, nc, "full-size blocks, " + std::to_string(tokens) + " tokens");
  }
  report(nc, "full2");
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
  NullContext nc = NullContext::build(m, qualified(man.cond_tokens, tokens));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  sampler::SamplerOptions o = sampler::SamplerOptions::protocol();
  o.steps = testing::env_int("SPARSE3D_FULL_STEPS", 15);
  std::printf("[full] %d steps\n", o.steps);
  for (const auto* e : picked)
    check_all_paths(m, testing::asset_inputs(man, *e, m.config().out_channels), o, nc, e->name);
  report(nc, "full");
}

// A deliberately wrong cached row: qualification fails for every M, the cache is refused
// (counted, reported) and the exact path runs: the outputs stay pure_eager's bits.
TEST(NullContextGpu, ForcedQualificationFailureFallsBackAndStaysBitwise) {
  S3D_REQUIRE_GPU();
  contract::reset_fallbacks();
  const std::string dir = work_dir();
  ModelConfig c = preset("trellis2-shape-1024");
  c.num_blocks = 2;
  make_checkpoint(c, 13, dir + "/full2", DType::BF16);
  Transformer m(load_checkpoint(dir + "/full2.json", Device::CUDA));
  NullContextOptions opt = qualified(4101, {3664});
  opt.qualification.tamper_cached_row = [](int block, Tensor& row) {
    if (block != 1) return;
    Tensor h = row.to(Device::CPU);
    h.data_as<uint16_t>()[17] ^= 1u;  // one bit of one element of one layer
    row.copy_from(h);
  };
  NullContext nc = NullContext::build(m, opt);
  ASSERT_EQ(nc.qualification().m, 0) << nc.report();
  for (const auto& cand : nc.qualification().candidates)
    EXPECT_NE(cand.failure.find("block 1"), std::string::npos) << cand.failure;
  auto in = testing::synthetic_inputs({3664}, 4101, c.cond_channels, c.out_channels, 9);
  sampler::SamplerOptions o;
  o.steps = 2;
  for (const char* spec : {"canonical_cache_null", "canonical_cache_null+batched_cfg"}) {
    SCOPED_TRACE(spec);
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, &nc);
  }
  auto f = contract::fallback_counts();
  ASSERT_EQ(f.size(), 1u) << contract::format_fallbacks(f);
  EXPECT_EQ(f[0].optimization, "null_context_cache");
  EXPECT_EQ(f[0].count, 2u);
  EXPECT_NE(f[0].reason.find("ran null_context_exact"), std::string::npos) << f[0].reason;
  report(nc, "forced-failure");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace s3d::model
