// The fused kernels in the model on the GPU (tiny preset): kernel_fusion against pure_eager,
// bitwise without the epilogue and close with it, and the eager launches it removes. The
// op-level checks (each fused candidate against its op's reference chain on the GPU and
// against its CPU version) are in tests/ops/test_fused_ops.cpp, built into this suite too.
//
// Run with build/bin/sparse3d_gpu_tests --gtest_filter='Fused*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d {
namespace {

// ---- the model on the GPU (tiny preset) ----

namespace fs = std::filesystem;

struct FusedModelGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_fused_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json"))
      model::make_checkpoint(model::preset("tiny"), 5, dir + "/tiny", DType::BF16);
    contract::reset_fallbacks();
  }
  std::string dir;
};

TEST_F(FusedModelGpu, KernelFusionWithoutTheEpilogueIsBitwisePureEager) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = testing::synthetic_inputs({1, 7, 333}, 13, m.config().cond_channels, 32, 21);
  sampler::SamplerOptions o;
  o.steps = 3;
  o.guidance_rescale = 0.3;
  for (const std::string spec : {"kernel_fusion-gemm_gelu_epilogue",
                                 "kernel_fusion-gemm_gelu_epilogue+batched_cfg",
                                 "kernel_fusion-gemm_gelu_epilogue+gelu_tanh",
                                 "kernel_fusion-gemm_gelu_epilogue+cond_kv_cache"}) {
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, nullptr);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

TEST_F(FusedModelGpu, KernelFusionWithTheEpilogueStaysCloseToPureEager) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = testing::synthetic_inputs({1, 7, 333}, 13, m.config().cond_channels, 32, 23);
  sampler::SamplerOptions o;
  o.steps = 3;
  for (bool batched : {false, true}) {
    auto ref = testing::reference_run(m, in, o, batched);
    sampler::SamplerOptions f = o;
    f.apply(
        sparse3d::ExecutionPlan::parse(batched ? "kernel_fusion+batched_cfg" : "kernel_fusion"));
    auto got = sampler::sample(m, in, f, true);
    const testing::ErrorStats e = testing::compare(got.latent.to_floats(), ref.latent.to_floats());
    std::cout << "[ model    ] kernel_fusion" << (batched ? "+batched_cfg" : "")
              << " vs pure_eager (GPU): latent rel L2 " << e.rel_l2 << " max abs " << e.max_abs
              << "\n";
    EXPECT_EQ(e.non_finite, 0);
    EXPECT_LE(e.rel_l2, 2e-2);
  }
}

// One conditional forward: the eager ops the fused kernels replace are gone.
TEST_F(FusedModelGpu, ReplacedEagerLaunchesAreGone) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = testing::synthetic_inputs({333}, 13, m.config().cond_channels, 32, 25);
  Tensor x = in.noise.to(Device::CUDA);
  Tensor t = Tensor::from_floats({500.0f}, {1}, DType::F32).to(Device::CUDA);
  Tensor cond = in.cond.to(Device::CUDA);
  auto count = [&](const std::string& spec) {
    model::Request req = m.prepare(in.coords, 1, 13);
    req.use_flags(sparse3d::ExecutionPlan::parse(spec).flags());
    m.forward(req, x, t, cond);  // warm-up
    synchronize();
    reset_launch_counts();
    m.forward(req, x, t, cond);
    synchronize();
    return launch_counts();
  };
  const LaunchCounts eager = count("pure_eager"),
                     fused = count("kernel_fusion+qk_rmsnorm_cross_inplace");
  const int blocks = m.config().num_blocks;
  std::cout << "[ launches ] one forward: pure_eager " << eager.total << ", kernel_fusion "
            << fused.total << "\n";
  for (const auto& [op, n] : fused.by_op) std::cout << "  kernel_fusion " << op << " " << n << "\n";
  auto get = [](const LaunchCounts& c, const char* op) {
    auto it = c.by_op.find(op);
    return it == c.by_op.end() ? uint64_t{0} : it->second;
  };
  EXPECT_EQ(get(fused, "gather_rows"), 0u);
  EXPECT_EQ(get(fused, "add_scalar"), 0u);
  EXPECT_EQ(get(fused, "rope_apply"), 0u);
  EXPECT_EQ(get(fused, "gelu_tanh"), 0u);
  EXPECT_EQ(get(fused, "head_rmsnorm"), uint64_t(blocks));  // the cross-attention K only
  EXPECT_EQ(get(fused, "qk_rmsnorm_rope_inplace"), uint64_t(blocks));
  EXPECT_EQ(get(fused, "qk_rmsnorm_cross_inplace"), uint64_t(blocks));
  EXPECT_EQ(get(fused, "modulated_layernorm"), uint64_t(2 * blocks));
  EXPECT_EQ(get(fused, "gated_residual_add"), uint64_t(2 * blocks));
  EXPECT_LT(fused.total, eager.total);
}

}  // namespace
}  // namespace s3d
