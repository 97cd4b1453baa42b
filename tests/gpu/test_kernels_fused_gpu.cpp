// Fused kernels on the GPU. Each op family's entry point with the fused kernel
// (fused = true) against (a) the same entry point's reference chain on the GPU (fused =
// false, the chain pure_eager ships), bitwise where the contract says so, and (b) the fused
// kernel's CPU version under the contract the reference ops have between the backends
// (bitwise, or 1 bf16 ulp where a reduction or a transcendental is involved); at 1, 7, 1000
// and 30227 tokens and the real widths (C 1536, H 12, D 128); poisoned outputs.
// gemm_gelu_epilogue under its tolerance (gelu_epilogue_contract.h) with the maximum error
// printed. The tiny model with kernel_fusion against pure_eager on the GPU, and the eager
// launches it removes.
//
// Run with build/bin/sparse3d_gpu_tests --gtest_filter='Fused*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "../ops_plan.h"
#include "contract/fallback.h"
#include "core/bf16.h"
#include "core/cuda_util.h"
#include "epilogue_error.h"
#include "gelu_epilogue_contract.h"
#include "gemm/linear.h"
#include "gpu_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/gated_residual_add.h"
#include "kernels/gelu_tanh.h"
#include "kernels/layernorm.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "model/checkpoint.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using test::plan_if;
using test::plan_of;

using test::Contract;
using test::meets;
using test::on_gpu;
using test::random_tensor;
using testing::batch_runs;
using testing::copy_of;
using testing::count_poisoned;

constexpr int kH = 12, kD = 128;
constexpr int64_t kC = int64_t{kH} * kD;  // 1536
const std::vector<int64_t> kTokens = {1, 7, 1000, 30227};

TEST(FusedGpu, QkRmsNormRopeInPlace) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kTokens) {
    for (auto [norm, rope] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
      const std::string what = cat("qk_rmsnorm_rope T ", T, " norm ", norm, " rope ", rope);
      Tensor qkv = random_tensor({T, 3 * kC}, DType::BF16, 300 + T, 1.5f, 0.1f);
      Tensor qg = random_tensor({kH, kD}, DType::F32, 301, 0.3f, 1.0f);
      Tensor kg = random_tensor({kH, kD}, DType::F32, 302, 0.3f, 1.0f);
      Tensor coords = test::random_coords(T, 303);
      Tensor cos = Tensor::empty({T, kD / 2}, DType::F32, Device::CPU);
      Tensor sin = Tensor::empty({T, kD / 2}, DType::F32, Device::CPU);
      kernels::rope_phases(coords, kD, 1.0f, 10000.0f, cos, sin);
      // Both backends from the same phases (rope_phases itself is a 1-ulp op between them).
      Tensor qg_d = on_gpu(qg), kg_d = on_gpu(kg), cos_d = on_gpu(cos), sin_d = on_gpu(sin);
      auto ptr = [](bool on, const Tensor& t) { return on ? &t : nullptr; };

      Tensor ref_in_d = on_gpu(qkv);
      Tensor ref_d = ops::qk_rmsnorm_rope(plan_of({}), ref_in_d, kH, kD, ptr(norm, qg_d),
                                          ptr(norm, kg_d), ptr(rope, cos_d), ptr(rope, sin_d));
      EXPECT_TRUE(meets(ref_in_d, qkv, Contract::Bitwise, what + ": reference input untouched"));
      ASSERT_EQ(kernels::fused::qk_unsupported(ref_in_d, 3 * kC, kH, kD, ptr(rope, cos_d),
                                               ptr(rope, sin_d)),
                "");
      Tensor qkv_d = on_gpu(qkv);
      Tensor got_d = ops::qk_rmsnorm_rope(plan_of({sparse3d::Flag::qk_rmsnorm_rope_inplace}), qkv_d,
                                          kH, kD, ptr(norm, qg_d), ptr(norm, kg_d),
                                          ptr(rope, cos_d), ptr(rope, sin_d));
      EXPECT_EQ(got_d.data(), qkv_d.data()) << what << ": the fused kernel works in place";
      EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, what + " vs GPU reference chain"));

      Tensor qkv_h = copy_of(qkv);
      kernels::fused::qk_rmsnorm_rope_inplace(qkv_h, kH, kD, ptr(norm, qg), ptr(norm, kg),
                                              ptr(rope, cos), ptr(rope, sin));
      // The norm's fp64 sum is added in another order on the CPU: its output may differ by
      // 1 ulp (as head_rmsnorm between the backends); the rotation then carries that
      // absolute difference, up to an ulp of the pair's larger value, into its output
      // (however small the output), plus the output's own rounding.
      std::vector<float> y;
      if (norm && rope) {
        Tensor norm_in = copy_of(qkv);
        y = ops::qk_rmsnorm_rope(plan_of({}), norm_in, kH, kD, &qg, &kg, nullptr, nullptr)
                .to_floats();
      }
      EXPECT_TRUE(meets(got_d, qkv_h, norm ? Contract::Close : Contract::Bitwise,
                        what + " vs CPU version", [&](size_t i, double g, double c) {
                          if (y.empty()) return false;
                          const size_t p = i & ~size_t{1};
                          const double pair = std::fmax(std::fabs(y[p]), std::fabs(y[p + 1]));
                          return std::fabs(g - c) <=
                                 testing::bf16_spacing(pair) +
                                     testing::bf16_spacing(std::fmax(std::fabs(g), std::fabs(c)));
                        }));
    }
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST(FusedGpu, CrossQRmsNormInPlace) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kTokens) {
    const std::string what = cat("cross_q_rmsnorm T ", T);
    Tensor q = random_tensor({T, kC}, DType::BF16, 310 + T, 2.0f, -0.2f);
    Tensor g = random_tensor({kH, kD}, DType::F32, 311, 0.3f, 1.0f);
    Tensor g_d = on_gpu(g);
    Tensor ref_in_d = on_gpu(q);
    Tensor ref_d = ops::qk_rmsnorm_cross(plan_of({}), ref_in_d, g_d, kH, kD);
    Tensor q_d = on_gpu(q);
    Tensor got_d = ops::qk_rmsnorm_cross(plan_of({sparse3d::Flag::qk_rmsnorm_cross_inplace}), q_d,
                                         g_d, kH, kD);
    EXPECT_EQ(got_d.data(), q_d.data()) << what << ": the fused kernel works in place";
    EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, what + " vs GPU reference"));
    Tensor q_h = copy_of(q);
    kernels::fused::qk_rmsnorm_cross_inplace(q_h, g, kH, kD);
    EXPECT_TRUE(meets(got_d, q_h, Contract::Close, what + " vs CPU version"));
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST(FusedGpu, ModulatedLayerNorm) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kTokens) {
    for (int B : {1, 3}) {
      const std::string what = cat("modulated_layernorm T ", T, " B ", B);
      Tensor x = random_tensor({T, kC}, DType::BF16, 320 + T, 2.0f, 0.5f);
      Tensor mod = random_tensor({B, 6 * kC}, DType::BF16, 321 + B, 0.5f);
      Tensor bidx = batch_runs(T, B);
      Tensor x_d = on_gpu(x), mod_d = on_gpu(mod), bidx_d = on_gpu(bidx);
      const RowView sh_d = RowView::columns(mod_d, 3 * kC, kC), sc_d = RowView::columns(mod_d, 4 * kC, kC);
      Tensor ref_d = test::poisoned({T, kC}, DType::BF16, Device::CUDA);
      ops::modulated_layernorm(plan_of({}), x_d, sh_d, sc_d, bidx_d, 1e-6f, ref_d);
      Tensor got_d = test::poisoned({T, kC}, DType::BF16, Device::CUDA);
      ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x_d, sh_d, sc_d,
                               bidx_d, 1e-6f, got_d);
      EXPECT_EQ(count_poisoned(ref_d), 0) << what;
      EXPECT_EQ(count_poisoned(got_d), 0) << what;
      EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, what + " vs GPU reference chain"));
      Tensor got_h = Tensor::empty({T, kC}, DType::BF16, Device::CPU);
      const RowView sh = RowView::columns(mod, 3 * kC, kC), sc = RowView::columns(mod, 4 * kC, kC);
      kernels::fused::modulated_layernorm(x, sh, sc, bidx, 1e-6f, got_h);
      // layer_norm is a 1-ulp op between the backends: h may differ by 1 ulp, m = bf16(h s)
      // then by up to 2 ulps of m, and out = m + shift carries that absolute difference
      // (however small out is), plus out's own rounding.
      Tensor hn = Tensor::empty({T, kC}, DType::BF16, Device::CPU);
      kernels::layer_norm(x, nullptr, nullptr, 1e-6f, hn);
      const std::vector<float> hv = hn.to_floats(), mv = mod.to_floats(), bv = bidx.to_floats();
      EXPECT_TRUE(meets(got_d, got_h, Contract::Close, what + " vs CPU version",
                        [&](size_t i, double g, double c) {
                          const size_t t = i / kC, col = i % kC;
                          const double s = round_bf16(mv[size_t(bv[t]) * 6 * kC + 4 * kC + col] + 1.0f);
                          const double m = std::fabs(hv[i] * s);
                          return std::fabs(g - c) <=
                                 2 * testing::bf16_spacing(m) +
                                     testing::bf16_spacing(std::fmax(std::fabs(g), std::fabs(c)));
                        }));
    }
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST(FusedGpu, GatedResidualAdd) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kTokens) {
    for (int B : {1, 3}) {
      const std::string what = cat("gated_residual_add T ", T, " B ", B);
      Tensor x = random_tensor({T, kC}, DType::BF16, 330 + T, 3.0f);
      Tensor h = random_tensor({T, kC}, DType::BF16, 331 + T, 1.0f, 0.3f);
      Tensor mod = random_tensor({B, 6 * kC}, DType::BF16, 332 + B, 0.7f);
      Tensor bidx = batch_runs(T, B);
      Tensor x_d = on_gpu(x), h_d = on_gpu(h), mod_d = on_gpu(mod), bidx_d = on_gpu(bidx);
      const RowView gate_d = RowView::columns(mod_d, 5 * kC, kC);
      Tensor ref_d = test::poisoned({T, kC}, DType::BF16, Device::CUDA);
      ops::gated_residual_add(plan_of({}), x_d, h_d, gate_d, bidx_d, ref_d);
      Tensor got_d = test::poisoned({T, kC}, DType::BF16, Device::CUDA);
      ops::gated_residual_add(plan_of({sparse3d::Flag::gated_residual_add}), x_d, h_d, gate_d,
                              bidx_d, got_d);
      EXPECT_EQ(count_poisoned(ref_d), 0) << what;
      EXPECT_EQ(count_poisoned(got_d), 0) << what;
      EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, what + " vs GPU reference chain"));
      Tensor got_h = Tensor::empty({T, kC}, DType::BF16, Device::CPU);
      kernels::fused::gated_residual_add(x, h, RowView::columns(mod, 5 * kC, kC), bidx, got_h);
      EXPECT_TRUE(meets(got_d, got_h, Contract::Bitwise, what + " vs CPU version"));
    }
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST(FusedGpu, GeluTanhWide) {
  S3D_REQUIRE_CUDA();
  const int64_t hidden = 8192;
  for (int64_t T : kTokens) {
    const std::string what = cat("mlp_gelu T ", T);
    Tensor x = random_tensor({T, hidden}, DType::BF16, 340 + T, 3.0f);
    Tensor x_d = on_gpu(x);
    Tensor ref_d = test::poisoned({T, hidden}, DType::BF16, Device::CUDA);
    kernels::gelu_tanh(x_d, ref_d);
    Tensor got_d = test::poisoned({T, hidden}, DType::BF16, Device::CUDA);
    kernels::fused::gelu_tanh(x_d, got_d);
    EXPECT_EQ(count_poisoned(got_d), 0) << what;
    EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, what + " vs GPU reference"));
  }
  // An element count that leaves a tail past the last 16-element thread share.
  Tensor x = random_tensor({7 * 33 + 5}, DType::BF16, 349, 3.0f);
  Tensor x_d = on_gpu(x);
  Tensor ref_d = test::poisoned(x.shape(), DType::BF16, Device::CUDA);
  Tensor got_d = test::poisoned(x.shape(), DType::BF16, Device::CUDA);
  kernels::gelu_tanh(x_d, ref_d);
  kernels::fused::gelu_tanh(x_d, got_d);
  EXPECT_TRUE(meets(got_d, ref_d, Contract::Bitwise, "mlp_gelu tail"));
}

// fc1 of the MLP at the real shape: [T, 1536] x [8192, 1536]^T + b.
TEST(FusedGpu, GemmGeluEpilogueTolerance) {
  S3D_REQUIRE_CUDA();
  const int64_t K = kC, N = 8192;
  Tensor w = random_tensor({N, K}, DType::BF16, 350, 0.05f);  // |z| up to ~8 for unit x
  Tensor b = random_tensor({N}, DType::BF16, 351, 0.5f);
  Tensor w_d = on_gpu(w), b_d = on_gpu(b);
  for (int64_t T : kTokens) {
    const std::string what = cat("T ", T);
    Tensor x = random_tensor({T, K}, DType::BF16, 352 + T, 1.0f);
    Tensor x_d = on_gpu(x);
    Tensor u_d = Tensor::empty({T, N}, DType::BF16, Device::CUDA);
    gemm::linear(x_d, w_d, &b_d, u_d);
    Tensor ref_d = test::poisoned({T, N}, DType::BF16, Device::CUDA);
    ops::linear_gelu(plan_of({}), x_d, w_d, &b_d, ref_d);
    Tensor got_d = test::poisoned({T, N}, DType::BF16, Device::CUDA);
    ops::linear_gelu(plan_of({sparse3d::Flag::gemm_gelu_epilogue}), x_d, w_d, &b_d, got_d);
    EXPECT_EQ(count_poisoned(ref_d), 0) << what;
    EXPECT_EQ(count_poisoned(got_d), 0) << what;
    EXPECT_TRUE(testing::meets_gelu_epilogue_contract(u_d, ref_d, got_d, what));
    // The GPU version of the check (used on the full model) agrees with the host's.
    const testing::EpilogueError host = testing::gelu_epilogue_error(u_d, ref_d, got_d),
                                 dev = testing::gelu_epilogue_error_gpu(u_d, ref_d, got_d);
    EXPECT_EQ(dev.max_abs, host.max_abs) << what;
    EXPECT_EQ(dev.worst_excess, host.worst_excess) << what;
    EXPECT_EQ(dev.outside, host.outside) << what;
    EXPECT_EQ(dev.non_finite, host.non_finite) << what;
    EXPECT_NEAR(dev.rel_l2, host.rel_l2, 1e-9 + 1e-6 * host.rel_l2) << what;
    // fp64 golden on up to 9 rows (the first 8 and the last).
    const auto xv = x.to_floats(), wv = w.to_floats(), bv = b.to_floats();
    const auto rv = ref_d.to(Device::CPU).to_floats(), fv = got_d.to(Device::CPU).to_floats();
    double err_ref = 0, err_fused = 0;
    int64_t n_el = 0;
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < std::min<int64_t>(T, 8); ++r) rows.push_back(r);
    if (T > 8) rows.push_back(T - 1);
    for (int64_t r : rows) {
      for (int64_t n = 0; n < N; ++n) {
        double z = bv[n];
        for (int64_t k = 0; k < K; ++k) z += double(xv[r * K + k]) * wv[n * K + k];
        const double golden =
            0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
        err_ref += std::fabs(golden - rv[r * N + n]);
        err_fused += std::fabs(golden - fv[r * N + n]);
        ++n_el;
      }
    }
    std::cout << "[ golden   ] " << what << ": mean|golden - fused| " << err_fused / n_el
              << ", mean|golden - reference| " << err_ref / n_el << "\n";
    EXPECT_LE(err_fused, 1.1 * err_ref) << what;
  }
}

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
