// Fused kernels on the CPU backend: each op family's entry point with the fused
// kernel (fused = true) against the same entry point's reference chain (fused = false, the
// chain pure_eager ships), bitwise where the contract says so, on random non-zero inputs with
// odd token counts and widths; shapes the fused kernels refuse (the kernel throws, the entry
// point falls back, counted); the gemm_gelu_epilogue tolerance; and the tiny model with
// kernel_fusion (minus the epilogue) bitwise equal to pure_eager.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "../gelu_epilogue_contract.h"
#include "../model_inputs.h"
#include "../null_context_checks.h"
#include "../ops_plan.h"
#include "../test_numerics.h"
#include "contract/fallback.h"
#include "gemm/linear.h"
#include "kernel_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/gated_residual_add.h"
#include "kernels/gelu_tanh.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

using test::plan_if;
using test::plan_of;

using test::random_tensor;
using test::throws_error;
using testing::batch_runs;
using testing::copy_of;
using testing::count_poisoned;
using testing::same_bits;

using test::fallbacks_of;
constexpr auto poisoned = &test::poisoned_bf16;

struct FusedKernelsCpu : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

// ---- qk_rmsnorm_rope ----

void check_qk(int64_t T, int H, int D, bool norm, bool rope, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  Tensor qkv = random_tensor({T, 3 * C}, DType::BF16, seed, 1.5f, 0.1f);
  if (norm && T > 1) {  // one all-zero head: norm 0 clamped to 1e-12
    auto* p = qkv.data_as<uint16_t>();
    for (int d = 0; d < D; ++d) p[1 * 3 * C + C + d] = 0;
  }
  Tensor qg = random_tensor({H, D}, DType::F32, seed + 1, 0.3f, 1.0f);
  Tensor kg = random_tensor({H, D}, DType::F32, seed + 2, 0.3f, 1.0f);
  Tensor cos = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  Tensor sin = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  kernels::rope_phases(test::random_coords(T, seed + 3), D, 1.0f, 10000.0f, cos, sin);
  const Tensor* g0 = norm ? &qg : nullptr;
  const Tensor* g1 = norm ? &kg : nullptr;
  const Tensor* c = rope ? &cos : nullptr;
  const Tensor* s = rope ? &sin : nullptr;
  const std::string what = cat("T ", T, " H ", H, " D ", D, " norm ", norm, " rope ", rope);
  // The reference chain restacks into a new tensor and leaves its input alone.
  Tensor ref_in = copy_of(qkv);
  Tensor want = ops::qk_rmsnorm_rope(plan_of({}), ref_in, H, D, g0, g1, c, s);
  EXPECT_NE(want.data(), ref_in.data()) << what;
  EXPECT_TRUE(same_bits(ref_in, qkv, "reference input")) << what;
  // The fused kernel works in place.
  ASSERT_EQ(kernels::fused::qk_unsupported(qkv, 3 * C, H, D, c, s), "");
  Tensor got_in = copy_of(qkv);
  Tensor got = ops::qk_rmsnorm_rope(plan_of({sparse3d::Flag::qk_rmsnorm_rope_inplace}), got_in, H,
                                    D, g0, g1, c, s);
  EXPECT_EQ(got.data(), got_in.data()) << what;
  EXPECT_TRUE(same_bits(got, want, "qk_rmsnorm_rope")) << what;
  // v is the input's either way.
  auto v_of = [&](const Tensor& packed) {
    Tensor v = Tensor::empty({T, C}, DType::BF16, Device::CPU);
    RowView dst = RowView::of(v);
    kernels::copy_rows(RowView{packed, 2 * C, T, C, 3 * C}, dst);
    return v;
  };
  EXPECT_TRUE(same_bits(v_of(want), v_of(qkv), "reference v slot")) << what;
  EXPECT_TRUE(same_bits(v_of(got), v_of(qkv), "fused v slot")) << what;
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_rope_inplace"), 0u);
}

TEST_F(FusedKernelsCpu, QkRmsNormRopeFusedIsTheReferenceChainBitwise) {
  for (int64_t T : {1, 7, 33}) {
    check_qk(T, 2, 64, true, true, 10 + T);
    check_qk(T, 3, 16, true, true, 20 + T);   // odd head count, D = 16
    check_qk(T, 1, 136, true, true, 30 + T);  // D > 128: a second chunk per lane
    check_qk(T, 2, 64, true, false, 40 + T);  // ape models: norm only
    check_qk(T, 2, 64, false, true, 50 + T);  // no qk_rms_norm: RoPE only
  }
  check_qk(5, 12, 128, true, true, 60);  // the production head shape
}

TEST_F(FusedKernelsCpu, QkRmsNormRopeWithNothingToDoReturnsItsInput) {
  Tensor qkv = random_tensor({3, 3 * 16}, DType::BF16, 61);
  for (bool fused : {false, true}) {
    Tensor got = ops::qk_rmsnorm_rope(plan_if(fused, sparse3d::Flag::qk_rmsnorm_rope_inplace), qkv,
                                      2, 8, nullptr, nullptr, nullptr, nullptr);
    EXPECT_EQ(got.data(), qkv.data());
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FusedKernelsCpu, CrossQRmsNormFusedIsTheReferenceBitwise) {
  for (int64_t T : {1, 7, 33}) {
    for (auto [H, D] : {std::pair{2, 64}, std::pair{3, 24}, std::pair{12, 128}}) {
      Tensor q = random_tensor({T, int64_t{H} * D}, DType::BF16, 70 + T + D, 2.0f, -0.2f);
      Tensor g = random_tensor({H, D}, DType::F32, 80 + D, 0.3f, 1.0f);
      Tensor ref_in = copy_of(q);
      Tensor want = ops::qk_rmsnorm_cross(plan_of({}), ref_in, g, H, D);
      EXPECT_NE(want.data(), ref_in.data());
      EXPECT_TRUE(same_bits(ref_in, q, "reference input"));
      Tensor got_in = copy_of(q);
      Tensor got = ops::qk_rmsnorm_cross(plan_of({sparse3d::Flag::qk_rmsnorm_cross_inplace}),
                                         got_in, g, H, D);
      EXPECT_EQ(got.data(), got_in.data());
      EXPECT_TRUE(same_bits(got, want, "cross_q_rmsnorm")) << "T " << T << " D " << D;
    }
  }
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_cross_inplace"), 0u);
}

TEST_F(FusedKernelsCpu, QkKernelsRefuseUnsupportedShapesAndTheEntryPointsFallBack) {
  // head_dim 10: not a multiple of 8. The fused kernel throws ...
  Tensor qkv = random_tensor({3, 3 * 20}, DType::BF16, 90);
  Tensor g = random_tensor({2, 10}, DType::F32, 91);
  const std::string why = kernels::fused::qk_unsupported(qkv, 60, 2, 10, nullptr, nullptr);
  EXPECT_NE(why.find("head_dim 10"), std::string::npos) << why;
  EXPECT_TRUE(throws_error(
      [&] { kernels::fused::qk_rmsnorm_rope_inplace(qkv, 2, 10, &g, &g, nullptr, nullptr); },
      {"qk_rmsnorm_rope_inplace", "unsupported", "head_dim 10"}));
  // ... and the entry point runs the reference chain, counted with the reason.
  Tensor want = ops::qk_rmsnorm_rope(plan_of({}), qkv, 2, 10, &g, &g, nullptr, nullptr);
  Tensor got = ops::qk_rmsnorm_rope(plan_of({sparse3d::Flag::qk_rmsnorm_rope_inplace}), qkv, 2, 10,
                                    &g, &g, nullptr, nullptr);
  EXPECT_TRUE(same_bits(got, want, "qk_rmsnorm_rope fallback"));
  ASSERT_EQ(contract::fallback_counts().size(), 1u);
  EXPECT_EQ(contract::fallback_counts()[0].optimization, "qk_rmsnorm_rope_inplace");
  EXPECT_EQ(contract::fallback_counts()[0].reason, why);
  // A view starting 2 bytes into the storage: not 16-byte aligned.
  Tensor big = random_tensor({4 * 64 + 1}, DType::BF16, 92);
  Tensor odd = big.reshape({4 * 64 + 1}).rows(1, 4 * 64 + 1).reshape({4, 64});
  EXPECT_NE(kernels::fused::qk_unsupported(odd, 64, 1, 64, nullptr, nullptr), "");
  Tensor g64 = random_tensor({1, 64}, DType::F32, 93);
  EXPECT_TRUE(throws_error([&] { kernels::fused::qk_rmsnorm_cross_inplace(odd, g64, 1, 64); },
                           {"qk_rmsnorm_cross_inplace", "16-byte"}));
  Tensor q_want = ops::qk_rmsnorm_cross(plan_of({}), odd, g64, 1, 64);
  Tensor q_got =
      ops::qk_rmsnorm_cross(plan_of({sparse3d::Flag::qk_rmsnorm_cross_inplace}), odd, g64, 1, 64);
  EXPECT_TRUE(same_bits(q_got, q_want, "cross_q_rmsnorm fallback"));
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_cross_inplace"), 1u);
}

// ---- modulated_layernorm ----

void check_modulated(int64_t T, int64_t C, int B, uint64_t seed) {
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 1, 0.5f);
  Tensor bidx = batch_runs(T, B);
  const RowView shift = RowView::columns(mod, 3 * C, C), scale = RowView::columns(mod, 4 * C, C);
  Tensor want = poisoned({T, C});
  ops::modulated_layernorm(plan_of({}), x, shift, scale, bidx, 1e-6f, want);
  Tensor got = poisoned({T, C});
  ASSERT_EQ(kernels::fused::modulated_layernorm_unsupported(x, shift, scale, got), "");
  ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x, shift, scale, bidx,
                           1e-6f, got);
  EXPECT_EQ(count_poisoned(want), 0);
  EXPECT_EQ(count_poisoned(got), 0);
  EXPECT_TRUE(same_bits(got, want, "modulated_layernorm")) << "T " << T << " C " << C << " B " << B;
}

TEST_F(FusedKernelsCpu, ModulatedLayerNormFusedIsTheReferenceChainBitwise) {
  for (int64_t T : {1, 7, 33}) {
    check_modulated(T, 8, 1, 100 + T);
    check_modulated(T, 136, 3, 110 + T);  // C not a multiple of 16 or of the block width
    check_modulated(T, 1536, 2, 120 + T);
  }
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 0u);
}

TEST_F(FusedKernelsCpu, ModulatedLayerNormRefusesOddWidthsAndFallsBack) {
  for (int64_t C : {7, 30}) {
    Tensor x = random_tensor({3, C}, DType::BF16, 130);
    Tensor mod = random_tensor({1, 6 * C}, DType::BF16, 131);
    Tensor out = poisoned({3, C});
    const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
    EXPECT_NE(kernels::fused::modulated_layernorm_unsupported(x, shift, scale, out), "") << C;
    EXPECT_TRUE(throws_error(
        [&] { kernels::fused::modulated_layernorm(x, shift, scale, batch_runs(3, 1), 1e-6f, out); },
        {"modulated_layernorm", "unsupported", "multiple of 8"}));
    Tensor want = poisoned({3, C});
    ops::modulated_layernorm(plan_of({}), x, shift, scale, batch_runs(3, 1), 1e-6f, want);
    ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x, shift, scale,
                             batch_runs(3, 1), 1e-6f, out);
    EXPECT_EQ(count_poisoned(out), 0);
    EXPECT_TRUE(same_bits(out, want, "modulated_layernorm fallback")) << C;
  }
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 2u);
}

TEST_F(FusedKernelsCpu, ModulatedLayerNormRejectsABadBatchIndex) {
  Tensor x = random_tensor({3, 16}, DType::BF16, 140);
  Tensor mod = random_tensor({2, 96}, DType::BF16, 141);
  Tensor out = Tensor::empty({3, 16}, DType::BF16, Device::CPU);
  Tensor bidx = Tensor::from_ints({0, 1, 2}, {3});
  const RowView shift = RowView::columns(mod, 0, 16), scale = RowView::columns(mod, 16, 16);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x, shift, scale,
                                 bidx, 1e-6f, out);
      },
      {"modulated_layernorm: batch_index[2] = 2", "outside [0, 2)"}));
  EXPECT_TRUE(throws_error(
      [&] { ops::modulated_layernorm(plan_of({}), x, shift, scale, bidx, 1e-6f, out); },
      {"gather_rows: index[2] = 2", "outside [0, 2)"}));
}

// ---- gated_residual_add ----

TEST_F(FusedKernelsCpu, GatedResidualAddFusedIsTheReferenceChainBitwise) {
  for (int64_t T : {1, 7, 33}) {
    for (int64_t C : {8, 136, 1536}) {
      for (int B : {1, 3}) {
        Tensor x = random_tensor({T, C}, DType::BF16, 150 + T + C, 3.0f);
        Tensor h = random_tensor({T, C}, DType::BF16, 160 + T + C, 1.0f, 0.3f);
        Tensor mod = random_tensor({B, 6 * C}, DType::BF16, 170 + C, 0.7f);
        Tensor bidx = batch_runs(T, B);
        const RowView gate = RowView::columns(mod, 5 * C, C);
        Tensor want = poisoned({T, C});
        ops::gated_residual_add(plan_of({}), x, h, gate, bidx, want);
        Tensor got = poisoned({T, C});
        ops::gated_residual_add(plan_of({sparse3d::Flag::gated_residual_add}), x, h, gate, bidx,
                                got);
        EXPECT_EQ(count_poisoned(want), 0);
        EXPECT_EQ(count_poisoned(got), 0);
        EXPECT_TRUE(same_bits(got, want, "gated_residual_add")) << "T " << T << " C " << C;
        // The fused kernel in place into x gives the same bits.
        Tensor xi = copy_of(x);
        ops::gated_residual_add(plan_of({sparse3d::Flag::gated_residual_add}), xi, h, gate, bidx,
                                xi);
        EXPECT_TRUE(same_bits(xi, want, "gated_residual_add in place"));
      }
    }
  }
  EXPECT_EQ(fallbacks_of("gated_residual_add"), 0u);
}

TEST_F(FusedKernelsCpu, GatedResidualAddRefusesOddWidthsAndFallsBack) {
  Tensor x = random_tensor({3, 12}, DType::BF16, 180);
  Tensor mod = random_tensor({1, 72}, DType::BF16, 181);
  Tensor out = poisoned({3, 12});
  const RowView gate = RowView::columns(mod, 60, 12);
  EXPECT_NE(kernels::fused::gated_residual_add_unsupported(x, x, gate, out), "");
  EXPECT_TRUE(throws_error(
      [&] { kernels::fused::gated_residual_add(x, x, gate, batch_runs(3, 1), out); },
      {"gated_residual_add", "unsupported"}));
  Tensor want = poisoned({3, 12});
  ops::gated_residual_add(plan_of({}), x, x, gate, batch_runs(3, 1), want);
  ops::gated_residual_add(plan_of({sparse3d::Flag::gated_residual_add}), x, x, gate,
                          batch_runs(3, 1), out);
  EXPECT_EQ(count_poisoned(out), 0);
  EXPECT_TRUE(same_bits(out, want, "gated_residual_add fallback"));
  EXPECT_EQ(fallbacks_of("gated_residual_add"), 1u);
}

// ---- mlp_gelu (the wide kernel: on the CPU the reference loop) ----

TEST_F(FusedKernelsCpu, MlpGeluWideIsTheReferenceBitwise) {
  for (int64_t n : {1, 7, 33 * 17 + 3}) {
    Tensor x = random_tensor({n}, DType::BF16, 190 + n, 3.0f);
    Tensor want = poisoned({n});
    kernels::gelu_tanh(x, want);
    Tensor got = poisoned({n});
    kernels::fused::gelu_tanh(x, got);
    EXPECT_EQ(count_poisoned(want), 0);
    EXPECT_EQ(count_poisoned(got), 0);
    EXPECT_TRUE(same_bits(got, want, "mlp_gelu")) << n;
  }
}

// ---- linear_gelu with gemm_gelu_epilogue: bounded error, not bitwise ----

TEST_F(FusedKernelsCpu, GemmGeluEpilogueMeetsItsTolerance) {
  const int64_t K = 64, N = 256;
  for (int64_t T : {1, 7, 33}) {
    Tensor x = random_tensor({T, K}, DType::BF16, 200 + T, 1.0f);
    Tensor w = random_tensor({N, K}, DType::BF16, 210, 0.4f);  // |z| up to ~10
    Tensor b = random_tensor({N}, DType::BF16, 211, 0.5f);
    Tensor u = Tensor::empty({T, N}, DType::BF16, Device::CPU);
    gemm::linear(x, w, &b, u);
    Tensor ref = poisoned({T, N});
    ops::linear_gelu(plan_of({}), x, w, &b, ref);
    Tensor ref_wide = poisoned({T, N});
    ops::linear_gelu(plan_of({sparse3d::Flag::gelu_tanh}), x, w, &b, ref_wide);
    EXPECT_TRUE(same_bits(ref_wide, ref, "linear_gelu with the wide GELU"));
    Tensor fused = poisoned({T, N});
    ops::linear_gelu(plan_of({sparse3d::Flag::gemm_gelu_epilogue}), x, w, &b, fused);
    EXPECT_EQ(count_poisoned(ref), 0);
    EXPECT_EQ(count_poisoned(fused), 0);
    EXPECT_TRUE(testing::meets_gelu_epilogue_contract(u, ref, fused, cat("T ", T)));
    // fp64 golden: the fused path may not be noticeably less accurate than the reference.
    const auto xv = x.to_floats(), wv = w.to_floats(), bv = b.to_floats();
    const auto rv = ref.to_floats(), fv = fused.to_floats();
    double err_ref = 0, err_fused = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        double z = bv[n];
        for (int64_t k = 0; k < K; ++k) z += double(xv[t * K + k]) * wv[n * K + k];
        const double golden =
            0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
        err_ref += std::fabs(golden - rv[t * N + n]);
        err_fused += std::fabs(golden - fv[t * N + n]);
      }
    }
    std::cout << "[ golden   ] T " << T << ": mean|golden - fused| " << err_fused / (T * N)
              << ", mean|golden - reference| " << err_ref / (T * N) << "\n";
    EXPECT_LE(err_fused, 1.1 * err_ref) << "T " << T;
  }
}

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

TEST_F(FusedModelCpu, KernelFusionWithoutTheEpilogueIsBitwisePureEager) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({17, 40, 5}, 6, m.config().cond_channels, 32, 5);
  sampler::SamplerOptions o;
  o.steps = 3;
  o.guidance_rescale = 0.5;
  for (const auto& spec : bitwise_specs()) {
    auto ref = testing::reference_run(m, in, o, testing::spec_is_batched(spec));
    testing::expect_same_bits_as(ref, m, in, o, spec, nullptr);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

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

// Model-level regression of the epilogue: final latent within relative L2 2e-2 of
// pure_eager (tiny model, 3 steps), no NaN/Inf.
TEST_F(FusedModelCpu, KernelFusionWithTheEpilogueStaysCloseToPureEager) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CPU));
  auto in = testing::synthetic_inputs({33, 7}, 6, m.config().cond_channels, 32, 11);
  sampler::SamplerOptions o;
  o.steps = 3;
  for (bool batched : {false, true}) {
    auto ref = testing::reference_run(m, in, o, batched);
    sampler::SamplerOptions f = o;
    f.apply(sparse3d::ExecutionPlan::parse(batched ? "kernel_fusion+batched_cfg" : "kernel_fusion"));
    auto got = sampler::sample(m, in, f, true);
    const testing::ErrorStats e = testing::compare(got.latent.to_floats(), ref.latent.to_floats());
    const testing::ErrorStats v =
        testing::compare(got.first_v_cond.to_floats(), ref.first_v_cond.to_floats());
    std::cout << "[ model    ] kernel_fusion" << (batched ? "+batched_cfg" : "")
              << " vs pure_eager: latent rel L2 " << e.rel_l2 << " max abs " << e.max_abs
              << "; first v_cond rel L2 " << v.rel_l2 << "\n";
    EXPECT_EQ(e.non_finite, 0);
    EXPECT_LE(e.rel_l2, 2e-2);
    EXPECT_GT(e.rel_l2, 0.0) << "the epilogue rounds once: some bits should differ";
  }
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
