// gemm_gelu_epilogue on the full 30-block checkpoint and real payloads: every
// block's MLP fc1 input, taken from a pure_eager forward, goes through the
// reference chain (fc1 GEMM -> bf16 u -> gelu_tanh) and through the cuBLASLt bias+GELU
// epilogue; each of the 30 layers must meet the per-layer contract of
// gelu_epilogue_contract.h, and the table of per-layer errors is printed. Then the model-level
// regression: the final latent of kernel_fusion and canonical_cache_combined (which use the
// epilogue) within the stated tolerance of pure_eager's over the protocol's steps.
// Needs SPARSE3D_FULL_CKPT / SPARSE3D_FULL_MANIFEST (full_checkpoint.h); skipped otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "../ops_plan.h"
#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "epilogue_error.h"
#include "full_checkpoint.h"
#include "gelu_epilogue_contract.h"
#include "gemm/linear.h"
#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "null_context_checks.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d::model {
namespace {

using test::plan_if;
using test::plan_of;

// The model-level tolerance of the epilogue paths: relative L2 of the final latent against
// pure_eager's (the tiny-model test in test_kernels_fused_gpu.cpp states the same bound).
constexpr double kLatentRelL2 = 2e-2;

TEST(EpilogueFullGpu, EveryMlpLayerOnRealPayloadsAndTheFinalLatent) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: run on the GPU machine";
  const testing::FullCheckpoint full = testing::full_checkpoint();
  if (!full.missing.empty()) GTEST_SKIP() << full.missing;
  contract::reset_fallbacks();
  Transformer m(load_checkpoint(full.checkpoint, Device::CUDA));
  const ModelConfig& c = m.config();
  payload::Manifest man = payload::read_manifest(full.manifest);
  const auto picked = testing::full_assets(man);
  ASSERT_FALSE(picked.empty());
  double worst_abs = 0, worst_rel = 0;
  for (const auto* e : picked) {
    SCOPED_TRACE(e->name);
    sampler::Inputs in = testing::asset_inputs(man, *e, c.out_channels);
    const int L = static_cast<int>(in.cond.size(1));
    Request req = m.prepare(in.coords, 1, L);
    Tensor x = in.noise.to(Device::CUDA);
    Tensor cond = Tensor::empty(in.cond.shape(), DType::BF16, Device::CUDA);
    cond.copy_from(in.cond);
    Tensor t = Tensor::from_floats({1000.0f}, {1}, DType::F32).to(Device::CUDA);
    std::printf("[ epilogue ] %s (%lld tokens), first conditional forward, per MLP layer:\n"
                "| block | max abs | rel L2 | worst |d|/bound | outside bound | non-finite |\n"
                "|---:|---:|---:|---:|---:|---:|\n",
                e->name.c_str(), static_cast<long long>(in.coords.size(0)));
    req.mlp_probe = [&](int block, const Tensor& hm) {
      const Linear& fc1 = m.weights().blocks[static_cast<size_t>(block)].mlp.fc1;
      const int64_t T = hm.size(0), N = c.mlp_hidden();
      Tensor u = Tensor::empty({T, N}, DType::BF16, Device::CUDA);
      gemm::linear(hm, fc1.weight, &fc1.bias, u);
      Tensor ref = test::poisoned({T, N}, DType::BF16, Device::CUDA);
      ops::linear_gelu(plan_of({}), hm, fc1.weight, &fc1.bias, ref);
      Tensor fused = test::poisoned({T, N}, DType::BF16, Device::CUDA);
      ops::linear_gelu(plan_of({sparse3d::Flag::gemm_gelu_epilogue}), hm, fc1.weight, &fc1.bias,
                       fused);
      const testing::EpilogueError err = testing::gelu_epilogue_error_gpu(u, ref, fused);
      std::printf("| %d | %.4g | %.3e | %.3f | %lld | %lld |\n", block, err.max_abs, err.rel_l2,
                  err.worst_excess, static_cast<long long>(err.outside),
                  static_cast<long long>(err.non_finite));
      worst_abs = std::max(worst_abs, err.max_abs);
      worst_rel = std::max(worst_rel, err.rel_l2);
      EXPECT_EQ(err.non_finite, 0) << "block " << block;
      EXPECT_EQ(err.outside, 0) << "block " << block;
      EXPECT_LE(err.rel_l2, 0x1.0p-8) << "block " << block;
      std::fflush(stdout);
    };
    m.forward(req, x, t, cond);
    synchronize();

    sampler::SamplerOptions o = sampler::SamplerOptions::protocol();
    o.steps = testing::env_int("SPARSE3D_FULL_STEPS", 15);
    const auto ref = testing::reference_run(m, in, o, false);
    const auto ref_v = ref.latent.to_floats();
    for (const char* spec : {"kernel_fusion", "kernel_fusion+batched_cfg"}) {
      sampler::SamplerOptions f = o;
      f.apply(sparse3d::ExecutionPlan::parse(spec));
      auto got = sampler::sample(m, in, f);
      const testing::ErrorStats s = testing::compare(got.latent.to_floats(), ref_v);
      std::printf("[ model    ] %s, %d steps, %s vs pure_eager: final latent rel L2 %.3e, max abs "
                  "%.4g, non-finite %lld\n",
                  e->name.c_str(), o.steps, spec, s.rel_l2, s.max_abs,
                  static_cast<long long>(s.non_finite));
      EXPECT_EQ(s.non_finite, 0) << spec;
      EXPECT_LE(s.rel_l2, kLatentRelL2) << spec;
      std::fflush(stdout);
    }
  }
  std::printf("[ epilogue ] over every layer and asset: max abs %.4g, max rel L2 %.3e\n",
              worst_abs, worst_rel);
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

}  // namespace
}  // namespace s3d::model
