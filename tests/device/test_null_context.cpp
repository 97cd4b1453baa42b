// Null-context elimination and the condition K/V cache at model level on the test device
// (tests/device_under_test.h): after qualification every path's denoiser outputs and final
// latents are bitwise equal to pure_eager's, in serial and batched CFG (tiny preset, two
// assets); and a forced qualification failure (a deliberately wrong cached row) takes the
// fallback, counts and reports it, and still gives pure_eager's bits (on the CPU the tiny
// preset, on the GPU full-size blocks at 3,664 tokens). The CPU's unit-level checks are in
// tests/cpu/test_null_context_cpu.cpp and its further model-level ones in
// tests/cpu/test_null_context_model_cpu.cpp; the GPU's full-size runs in
// tests/gpu/test_null_context_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "contract/fallback.h"
#include "device/device_test_util.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "sampler/sampler.h"

namespace s3d::model {
namespace {

using test::kTestDevice;
using test::kTestOnCuda;

struct NullContextOnDevice : ::testing::Test {
  static void TearDownTestSuite() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir.clear();
  }
  void SetUp() override {
    S3D_TEST_DEVICE();
    if (dir.empty()) dir = test::scratch_dir("null_context_device");
    contract::reset_fallbacks();
  }
  static std::string dir;
};
std::string NullContextOnDevice::dir;

TEST_F(NullContextOnDevice, TinyPresetEveryPathIsBitwisePureEager) {
  Transformer m(load_checkpoint(test::checkpoint_in(dir, "tiny", preset("tiny"), 5), kTestDevice));
  auto in = testing::synthetic_inputs({257, 31}, 29, m.config().cond_channels, 32, 31);
  NullContext nc = NullContext::build(m, testing::qualified_options(29, {288}));
  ASSERT_TRUE(nc.applicability().ok) << nc.applicability().reason;
  if (!kTestOnCuda) {  // the CPU GEMM: every M gives the reference's bits
    ASSERT_EQ(nc.qualification().m, 1) << nc.report();
  }
  sampler::SamplerOptions o;
  o.steps = 4;
  o.guidance_rescale = 0.3;
  testing::expect_every_path_bitwise(m, in, o, nc, "tiny");
  testing::report_qualification(nc, "tiny");
  if (!kTestOnCuda) {  // qualified, so nothing fell back
    EXPECT_TRUE(contract::fallback_counts().empty())
        << contract::format_fallbacks(contract::fallback_counts());
  }
}

// The model of the forced failure: the CPU's the tiny preset, the GPU's two full-size blocks
// (the trellis2-shape-1024 block shapes) at the benchmark's 3,664 tokens and 4,101 condition
// tokens, the GEMM shapes the qualification sees on the full model.
struct ForcedCase {
  ModelConfig config;
  uint64_t checkpoint_seed;
  int cond_tokens;
  int64_t tokens;
};

ForcedCase forced_case() {
  if (!kTestOnCuda) return {preset("tiny"), 7, 7, 44};
  ModelConfig c = preset("trellis2-shape-1024");
  c.num_blocks = 2;
  return {c, 13, 4101, 3664};
}

// A deliberately wrong cached row: qualification fails for every M, the cache is refused
// (counted once per request, reported) and the exact path runs: pure_eager's bits.
TEST_F(NullContextOnDevice, ForcedQualificationFailureFallsBackCountedAndStaysBitwise) {
  const ForcedCase f = forced_case();
  Transformer m(load_checkpoint(test::checkpoint_in(dir, "forced", f.config, f.checkpoint_seed),
                                kTestDevice));
  NullContextOptions opt = testing::qualified_options(f.cond_tokens, {f.tokens});
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
  auto in = testing::synthetic_inputs({f.tokens}, f.cond_tokens, f.config.cond_channels,
                                      f.config.out_channels, 9);
  sampler::SamplerOptions o;
  o.steps = 2;
  for (const char* spec : {"canonical_cache_null", "canonical_cache_null+batched_cfg"}) {
    SCOPED_TRACE(spec);
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, &nc);
  }
  auto fb = contract::fallback_counts();
  ASSERT_EQ(fb.size(), 1u) << contract::format_fallbacks(fb);
  EXPECT_EQ(fb[0].optimization, "null_context_cache");
  EXPECT_EQ(fb[0].count, 2u);  // once per request
  EXPECT_NE(fb[0].reason.find("ran null_context_exact"), std::string::npos) << fb[0].reason;
  testing::report_qualification(nc, "forced-failure");
}

}  // namespace
}  // namespace s3d::model
