// The fused kernels in the model on the test device (tests/device_under_test.h), tiny preset:
// kernel_fusion without the epilogue, and each bitwise candidate alone, bitwise equal to
// pure_eager in serial and batched CFG; with the epilogue close to it. The op-level checks
// (each fused candidate against its op's reference chain) are in tests/ops/test_fused_ops.cpp;
// the CPU's refused widths and the combined path in tests/cpu/test_kernels_fused.cpp; the
// eager launches kernel_fusion removes on the GPU in tests/gpu/test_kernels_fused_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "contract/fallback.h"
#include "device/device_test_util.h"
#include "model/checkpoint.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using test::kTestDevice;
using test::kTestOnCuda;

// The inputs of a test: the CPU's small, the GPU's reaching past a tile (333 tokens).
struct Inputs {
  std::vector<int64_t> tokens;
  int cond_tokens;
  uint64_t seed;
};

struct FusedModel : ::testing::Test {
  static void TearDownTestSuite() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir.clear();
  }
  void SetUp() override {
    S3D_TEST_DEVICE();
    if (dir.empty()) dir = test::scratch_dir("fused_model");
    // The tiny preset, with the seed each backend's suite had.
    checkpoint = test::checkpoint_in(dir, "tiny", model::preset("tiny"), kTestOnCuda ? 5 : 7);
    contract::reset_fallbacks();
  }
  static sampler::Inputs inputs(const model::Transformer& m, const Inputs& i) {
    return testing::synthetic_inputs(i.tokens, i.cond_tokens, m.config().cond_channels, 32, i.seed);
  }
  static std::string dir;
  std::string checkpoint;
};
std::string FusedModel::dir;

// Every bitwise candidate, alone and together, serial and batched CFG.
const std::vector<std::string>& bitwise_specs() {
  static const std::vector<std::string> specs = {
      "kernel_fusion-gemm_gelu_epilogue",
      "kernel_fusion-gemm_gelu_epilogue+batched_cfg",
      "kernel_fusion-gemm_gelu_epilogue+gelu_tanh",
      "pure_eager+qk_rmsnorm_rope_inplace",
      "pure_eager+modulated_layernorm",
      "pure_eager+gated_residual_add",
      "pure_eager+qk_rmsnorm_cross_inplace",
      "pure_eager+gelu_tanh+batched_cfg",
      "kernel_fusion-gemm_gelu_epilogue+cond_kv_cache",
  };
  return specs;
}

TEST_F(FusedModel, KernelFusionWithoutTheEpilogueIsBitwisePureEager) {
  model::Transformer m(model::load_checkpoint(checkpoint, kTestDevice));
  const Inputs i = kTestOnCuda ? Inputs{{1, 7, 333}, 13, 21} : Inputs{{17, 40, 5}, 6, 5};
  auto in = inputs(m, i);
  sampler::SamplerOptions o;
  o.steps = 3;
  o.guidance_rescale = kTestOnCuda ? 0.3 : 0.5;
  for (const auto& spec : bitwise_specs()) {
    SCOPED_TRACE(spec);
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, nullptr);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

// Model-level regression of the epilogue: final latent within relative L2 2e-2 of
// pure_eager (tiny model, 3 steps), no NaN/Inf, and not bitwise (it rounds once).
TEST_F(FusedModel, KernelFusionWithTheEpilogueStaysCloseToPureEager) {
  model::Transformer m(model::load_checkpoint(checkpoint, kTestDevice));
  const Inputs i = kTestOnCuda ? Inputs{{1, 7, 333}, 13, 23} : Inputs{{33, 7}, 6, 11};
  auto in = inputs(m, i);
  sampler::SamplerOptions o;
  o.steps = 3;
  for (bool batched : {false, true}) {
    auto ref = testing::reference_run(m, in, o, batched);
    sampler::SamplerOptions f = o;
    f.apply(
        sparse3d::ExecutionPlan::parse(batched ? "kernel_fusion+batched_cfg" : "kernel_fusion"));
    auto got = sampler::sample(m, in, f, true);
    const testing::ErrorStats e = testing::compare(got.latent.to_floats(), ref.latent.to_floats());
    const testing::ErrorStats v =
        testing::compare(got.first_v_cond.to_floats(), ref.first_v_cond.to_floats());
    std::cout << "[ model    ] kernel_fusion" << (batched ? "+batched_cfg" : "")
              << " vs pure_eager (" << device_name(kTestDevice) << "): latent rel L2 " << e.rel_l2
              << " max abs " << e.max_abs << "; first v_cond rel L2 " << v.rel_l2 << "\n";
    EXPECT_EQ(e.non_finite, 0);
    EXPECT_LE(e.rel_l2, 2e-2);
    EXPECT_GT(e.rel_l2, 0.0) << "the epilogue rounds once: some bits should differ";
  }
}

}  // namespace
}  // namespace s3d
