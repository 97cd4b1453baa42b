// The fused kernels in the model on the CPU backend: canonical_cache_combined (minus the
// epilogue) bitwise equal to pure_eager; widths the fused ops refuse falling back, counted,
// and still bitwise; the kernel_fusion path's flags. kernel_fusion and each bitwise candidate
// against pure_eager run on both backends in tests/device/test_fused_model.cpp; the op-level
// checks (each fused candidate against its op's reference chain) in tests/ops/test_fused_ops.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "../model_inputs.h"
#include "../null_context_checks.h"
#include "../test_numerics.h"
#include "contract/fallback.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

// ---- the model ----

namespace fs = std::filesystem;

struct FusedModelCpu : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_fused_model_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    model::make_checkpoint(model::preset("tiny"), 7, dir + "/tiny", DType::BF16);
    // Widths the fused ops refuse: C = 132 (not a multiple of 8), head_dim 66.
    model::ModelConfig odd = model::preset("tiny");
    odd.model_channels = 132;
    model::make_checkpoint(odd, 8, dir + "/odd", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  void SetUp() override { contract::reset_fallbacks(); }
  static std::string dir;
};
std::string FusedModelCpu::dir;

TEST_F(FusedModelCpu, CanonicalCacheCombinedWithoutTheEpilogueIsBitwisePureEager) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({61}, 9, m.config().cond_channels, 32, 3);
  model::NullContext nc = model::NullContext::build(m, testing::qualified_options(9, {61}));
  sampler::SamplerOptions o;
  o.steps = 3;
  for (const std::string spec : {"canonical_cache_combined-gemm_gelu_epilogue",
                                 "canonical_cache_combined-gemm_gelu_epilogue+batched_cfg"}) {
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, &nc);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

TEST_F(FusedModelCpu, UnsupportedWidthsFallBackCountedAndStayBitwise) {
  model::Transformer m(model::load_checkpoint(dir + "/odd.json", Device::CPU));
  auto in = testing::synthetic_inputs({9, 4}, 5, m.config().cond_channels, 32, 13);
  sampler::SamplerOptions o;
  o.steps = 2;
  o.guidance = 7.5;
  auto ref = testing::reference_run(m, in, o, false);
  contract::reset_fallbacks();
  testing::expect_same_bits_as(ref, m, in, o,
                               "kernel_fusion-gemm_gelu_epilogue+qk_rmsnorm_cross_inplace", nullptr);
  // 2 steps x 2 forwards x 2 blocks; two modulated norms and two residuals per block.
  std::map<std::string, uint64_t> n;
  for (const auto& c : contract::fallback_counts()) n[c.optimization] += c.count;
  EXPECT_EQ(n["qk_rmsnorm_rope_inplace"], 8u) << contract::format_fallbacks(contract::fallback_counts());
  EXPECT_EQ(n["qk_rmsnorm_cross_inplace"], 8u);
  EXPECT_EQ(n["modulated_layernorm"], 16u);
  EXPECT_EQ(n["gated_residual_add"], 16u);
}

TEST(FusedPlan, KernelFusionPathsCarryTheirFlags) {
  using sparse3d::Flag;
  auto p = sparse3d::ExecutionPlan::parse("kernel_fusion");
  for (Flag f : {Flag::qk_rmsnorm_rope_inplace, Flag::modulated_layernorm,
                 Flag::gated_residual_add, Flag::gemm_gelu_epilogue})
    EXPECT_TRUE(p.on(f)) << sparse3d::name(f);
  EXPECT_FALSE(p.on(Flag::gelu_tanh));  // superseded by the epilogue; a measured candidate only
  // Rejected: no gain in the H200 leave-one-out (bench/results/2026-11-29-h200-fusion.md).
  EXPECT_FALSE(p.on(Flag::qk_rmsnorm_cross_inplace));
  EXPECT_FALSE(p.on(Flag::null_context_cache));
  auto c = sparse3d::ExecutionPlan::parse("canonical_cache_combined");
  EXPECT_TRUE(c.on(Flag::null_context_cache) && c.on(Flag::qk_rmsnorm_rope_inplace));
  EXPECT_EQ(sparse3d::ExecutionPlan::parse("kernel_fusion-gelu_tanh").label(), "kernel_fusion");
  for (const auto& f : sparse3d::flag_infos()) EXPECT_GT(f.calls_per_step, 0) << f.name;
  // The request carries the plan's flags as they are: the forward reads the fused ones.
  EXPECT_EQ(p.flags(), (sparse3d::FlagSet{Flag::qk_rmsnorm_rope_inplace, Flag::modulated_layernorm,
                                          Flag::gated_residual_add, Flag::gemm_gelu_epilogue}));
}

}  // namespace
}  // namespace s3d
