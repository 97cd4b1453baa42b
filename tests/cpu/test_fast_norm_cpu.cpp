// Tolerance kernels (src/kernels/fast_norm.h) on the CPU backend: each
// op (ops/), run with its tolerance candidate on, against the fp64 golden under the fp64-golden
// rule, r being the bitwise entry point's output (the reference chain), on random non-zero inputs:
// token counts 1, 3, 37, 1001, widths 8, 24, 1536, 1544, head dims 8, 24, 64, 128, several assets
// with random batch indices, gamma and the modulation far from trivial; poisoned outputs;
// the support rules (refused shape: fallback counted, the bitwise entry point's bits).
#include <gtest/gtest.h>

#include <string>

#include "../fast_norm_golden.h"
#include "../ops_plan.h"
#include "../test_numerics.h"
#include "bench/kernel_bandwidth.h"
#include "contract/fallback.h"
#include "kernel_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/fast_norm.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"

namespace s3d {
namespace {

using test::plan_if;
using test::plan_of;

using test::random_tensor;
using test::throws_error;
using testing::copy_of;
using testing::count_poisoned;
using testing::Golden;

const std::vector<int64_t> kTokens = {1, 3, 37, 1001};

using test::fallbacks_of;
constexpr auto poisoned = &test::poisoned_bf16;

struct FastNormCpu : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

// ---- modulated LayerNorm ----

void check_modulated(int64_t T, int64_t C, int B, uint64_t seed) {
  const std::string what = cat("fast modulated_layernorm T ", T, " C ", C, " B ", B);
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 1, 0.5f);
  Tensor bidx = test::random_ints({T}, seed + 2, 0, B);
  const RowView shift = RowView::columns(mod, 3 * C, C), scale = RowView::columns(mod, 4 * C, C);
  Tensor ref = poisoned({T, C});
  ops::modulated_layernorm(plan_of({}), x, shift, scale, bidx, 1e-6f, ref);
  ASSERT_EQ(kernels::fast::modulated_layernorm_unsupported(x, shift, scale, ref), "") << what;
  Tensor got = poisoned({T, C});
  ops::modulated_layernorm(
      plan_of({sparse3d::Flag::fast_modulated_layernorm, sparse3d::Flag::modulated_layernorm}), x,
      shift, scale, bidx, 1e-6f, got);
  EXPECT_EQ(count_poisoned(ref), 0) << what;
  EXPECT_EQ(count_poisoned(got), 0) << what;
  const Golden g = testing::golden_modulated_layernorm(x, shift, scale, bidx, 1e-6f);
  EXPECT_TRUE(testing::meets_golden_rule(g, ref.to_floats(), got.to_floats(), what));
  // In place (out = x) gives the same bits: each row is read whole before it is written.
  Tensor xi = copy_of(x);
  kernels::fast::modulated_layernorm(xi, shift, scale, bidx, 1e-6f, xi);
  EXPECT_TRUE(testing::bitwise_equal(xi, got)) << what << ": in place";
}

TEST_F(FastNormCpu, ModulatedLayerNormMeetsTheGoldenRule) {
  for (int64_t T : kTokens) {
    check_modulated(T, 8, 1, 1000 + T);
    check_modulated(T, 24, 3, 1010 + T);    // fewer chunks than lanes
    check_modulated(T, 1544, 3, 1020 + T);  // 193 chunks: 7 per lane, not all lanes full
    check_modulated(T, 1536, 2, 1030 + T);  // the model's width: 6 chunks per lane
  }
  check_modulated(5, 4096, 2, 1040);  // the widest row the kernel holds
  EXPECT_EQ(fallbacks_of("fast_modulated_layernorm"), 0u);
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 0u);
}

// A row far from zero mean: the fp32 two-pass statistics keep the rule (a one-pass
// E[x^2] - mean^2 would cancel here).
TEST_F(FastNormCpu, ModulatedLayerNormKeepsTheRuleOnAnOffsetRow) {
  const int64_t T = 37, C = 1536;
  Tensor x = random_tensor({T, C}, DType::BF16, 1050, 0.05f, 30.0f);
  Tensor mod = random_tensor({2, 6 * C}, DType::BF16, 1051, 0.5f);
  Tensor bidx = test::random_ints({T}, 1052, 0, 2);
  const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
  Tensor ref = poisoned({T, C}), got = poisoned({T, C});
  ops::modulated_layernorm(plan_of({}), x, shift, scale, bidx, 1e-6f, ref);
  ops::modulated_layernorm(plan_of({sparse3d::Flag::fast_modulated_layernorm}), x, shift, scale,
                           bidx, 1e-6f, got);
  const Golden g = testing::golden_modulated_layernorm(x, shift, scale, bidx, 1e-6f);
  EXPECT_TRUE(testing::meets_golden_rule(g, ref.to_floats(), got.to_floats(), "offset rows"));
}

TEST_F(FastNormCpu, ModulatedLayerNormRefusesUnsupportedWidthsAndFallsBack) {
  // C = 12: not a multiple of 8 (the bitwise twin refuses it too, and falls back to the
  // chain); C = 4104: wider than a warp's registers (the bitwise fused kernel takes it).
  for (auto [C, reason, twin_falls_back] :
       {std::tuple{int64_t{12}, "multiple of 8", true}, std::tuple{int64_t{4104}, "exceeds 4096", false}}) {
    contract::reset_fallbacks();
    Tensor x = random_tensor({3, C}, DType::BF16, 1100 + C, 2.0f, 0.5f);
    Tensor mod = random_tensor({2, 6 * C}, DType::BF16, 1101 + C, 0.5f);
    Tensor bidx = test::random_ints({3}, 1102, 0, 2);
    const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
    Tensor out = poisoned({3, C});
    const std::string why = kernels::fast::modulated_layernorm_unsupported(x, shift, scale, out);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_TRUE(
        throws_error([&] { kernels::fast::modulated_layernorm(x, shift, scale, bidx, 1e-6f, out); },
                     {"fast modulated_layernorm", "unsupported", reason}));
    EXPECT_EQ(count_poisoned(out), 3 * C) << "a refused call writes nothing";
    for (bool fused : {false, true}) {
      Tensor want = poisoned({3, C});
      ops::modulated_layernorm(plan_if(fused, sparse3d::Flag::modulated_layernorm), x, shift, scale,
                               bidx, 1e-6f, want);
      Tensor got = poisoned({3, C});
      ops::modulated_layernorm((fused ? plan_of({sparse3d::Flag::fast_modulated_layernorm,
                                                 sparse3d::Flag::modulated_layernorm})
                                      : plan_of({sparse3d::Flag::fast_modulated_layernorm})),
                               x, shift, scale, bidx, 1e-6f, got);
      EXPECT_EQ(count_poisoned(got), 0);
      EXPECT_TRUE(testing::bitwise_equal(got, want)) << "C " << C << " fused " << fused;
    }
    EXPECT_EQ(fallbacks_of("fast_modulated_layernorm"), 2u) << C;
    // The bitwise twin's own refusal is counted under its own flag (once by the op's ladder
    // with fused = true, once by the direct call).
    EXPECT_EQ(fallbacks_of("modulated_layernorm"), twin_falls_back ? 2u : 0u) << C;
    for (const auto& c : contract::fallback_counts()) {
      if (c.optimization == "fast_modulated_layernorm") {
        EXPECT_EQ(c.reason, why);
      }
    }
  }
}

TEST_F(FastNormCpu, ModulatedLayerNormRejectsABadBatchIndex) {
  Tensor x = random_tensor({3, 16}, DType::BF16, 1140);
  Tensor mod = random_tensor({2, 96}, DType::BF16, 1141);
  Tensor out = Tensor::empty({3, 16}, DType::BF16, Device::CPU);
  Tensor bidx = Tensor::from_ints({0, 1, 2}, {3});
  const RowView shift = RowView::columns(mod, 0, 16), scale = RowView::columns(mod, 16, 16);
  EXPECT_TRUE(throws_error(
      [&] {
        ops::modulated_layernorm(plan_of({sparse3d::Flag::fast_modulated_layernorm,
                                          sparse3d::Flag::modulated_layernorm}),
                                 x, shift, scale, bidx, 1e-6f, out);
      },
      {"fast modulated_layernorm: batch_index[2] = 2", "outside [0, 2)"}));
}

// ---- q/k RMSNorm + RoPE ----

void check_qk(int64_t T, int H, int D, bool norm, bool rope, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  const std::string what = cat("fast qk T ", T, " H ", H, " D ", D, " norm ", norm, " rope ", rope);
  const testing::QkOperands o = testing::make_qk_operands(T, H, D, norm, seed);
  const Tensor &qkv = o.qkv, &qg = o.q_gamma, &kg = o.k_gamma, &cos = o.cos, &sin = o.sin;
  const Tensor* g0 = norm ? &qg : nullptr;
  const Tensor* g1 = norm ? &kg : nullptr;
  const Tensor* c = rope ? &cos : nullptr;
  const Tensor* s = rope ? &sin : nullptr;
  Tensor ref_in = copy_of(qkv);
  const Tensor ref = ops::qk_rmsnorm_rope(plan_of({}), ref_in, H, D, g0, g1, c, s);
  ASSERT_EQ(kernels::fast::qk_unsupported(qkv, 3 * C, H, D, g0, g1, c, s), "") << what;
  Tensor got_in = copy_of(qkv);
  const Tensor got = ops::qk_rmsnorm_rope(
      plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope, sparse3d::Flag::qk_rmsnorm_rope_inplace}),
      got_in, H, D, g0, g1, c, s);
  EXPECT_EQ(got.data(), got_in.data()) << what << ": in place";
  const Golden g = testing::golden_qk(qkv, 2, H, D, g0, g1, c, s);
  EXPECT_TRUE(testing::meets_golden_rule(g, testing::leading_columns(ref, 2 * C),
                                         testing::leading_columns(got, 2 * C), what));
  // v is the input's.
  auto v_of = [&](const Tensor& packed) {
    Tensor v = Tensor::empty({T, C}, DType::BF16, Device::CPU);
    RowView dst = RowView::of(v);
    kernels::copy_rows(RowView{packed, 2 * C, T, C, 3 * C}, dst);
    return v;
  };
  EXPECT_TRUE(testing::bitwise_equal(v_of(got), v_of(qkv))) << what << ": v slot";
}

TEST_F(FastNormCpu, QkRmsNormRopeMeetsTheGoldenRule) {
  for (int64_t T : kTokens) {
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{12, 128}}) {
      const uint64_t seed = 2000 + 10 * T + D;
      check_qk(T, H, D, true, true, seed);
      check_qk(T, H, D, true, false, seed + 3);  // ape models: norm only
      check_qk(T, H, D, false, true, seed + 6);  // no qk_rms_norm: RoPE only
    }
  }
  check_qk(7, 1, 256, true, true, 2900);  // the widest head the kernel holds
  check_qk(7, 2, 136, true, true, 2910);  // 17 chunks: lanes with 2 and 3 chunks
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormCpu, QkRmsNormRopeWithNothingToDoReturnsItsInput) {
  Tensor qkv = random_tensor({3, 3 * 16}, DType::BF16, 2950);
  const Tensor before = copy_of(qkv);
  Tensor got = ops::qk_rmsnorm_rope(
      plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope, sparse3d::Flag::qk_rmsnorm_rope_inplace}), qkv,
      2, 8, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(got.data(), qkv.data());
  EXPECT_TRUE(testing::bitwise_equal(qkv, before));
  EXPECT_TRUE(throws_error(
      [&] { kernels::fast::qk_rmsnorm_rope(qkv, 2, 8, nullptr, nullptr, nullptr, nullptr); },
      {"fast qk_rmsnorm_rope", "nothing to do"}));
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormCpu, CrossQRmsNormMeetsTheGoldenRule) {
  for (int64_t T : kTokens) {
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{12, 128}}) {
      const std::string what = cat("fast cross_q_rmsnorm T ", T, " H ", H, " D ", D);
      Tensor q = random_tensor({T, int64_t{H} * D}, DType::BF16, 3000 + T + D, 2.0f, -0.2f);
      Tensor gm = random_tensor({H, D}, DType::F32, 3100 + D, 0.3f, 1.0f);
      Tensor ref_in = copy_of(q);
      const Tensor ref = ops::qk_rmsnorm_cross(plan_of({}), ref_in, gm, H, D);
      Tensor got_in = copy_of(q);
      const Tensor got = ops::qk_rmsnorm_cross(plan_of({sparse3d::Flag::fast_qk_rmsnorm_cross,
                                                        sparse3d::Flag::qk_rmsnorm_cross_inplace}),
                                               got_in, gm, H, D);
      EXPECT_EQ(got.data(), got_in.data()) << what << ": in place";
      const Golden g = testing::golden_qk(q, 1, H, D, &gm, nullptr, nullptr, nullptr);
      EXPECT_TRUE(testing::meets_golden_rule(g, ref.to_floats(), got.to_floats(), what));
    }
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormCpu, QkKernelsRefuseUnsupportedShapesAndTheEntryPointsFallBack) {
  // head_dim 12: not a multiple of 8 (the bitwise twin refuses it too); head_dim 264: wider
  // than 8 lanes' registers (the bitwise fused kernel takes it).
  for (auto [D, reason, twin_falls_back] :
       {std::tuple{12, "multiple of 8", true}, std::tuple{264, "exceeds 256", false}}) {
    contract::reset_fallbacks();
    const int H = 2;
    const int64_t C = int64_t{H} * D, T = 3;
    Tensor qkv = random_tensor({T, 3 * C}, DType::BF16, 3200 + D, 1.5f);
    Tensor qg = random_tensor({H, D}, DType::F32, 3201 + D, 0.3f, 1.0f);
    Tensor kg = random_tensor({H, D}, DType::F32, 3202 + D, 0.3f, 1.0f);
    Tensor cos = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
    Tensor sin = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
    kernels::rope_phases(test::random_coords(T, 3203), D, 1.0f, 10000.0f, cos, sin);
    const std::string why = kernels::fast::qk_unsupported(qkv, 3 * C, H, D, &qg, &kg, &cos, &sin);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    Tensor untouched = copy_of(qkv);
    EXPECT_TRUE(
        throws_error([&] { kernels::fast::qk_rmsnorm_rope(untouched, H, D, &qg, &kg, &cos, &sin); },
                     {"fast qk_rmsnorm_rope", "unsupported", reason}));
    EXPECT_TRUE(testing::bitwise_equal(untouched, qkv)) << "a refused call writes nothing";
    for (bool fused : {false, true}) {
      Tensor want_in = copy_of(qkv), got_in = copy_of(qkv);
      const Tensor want =
          ops::qk_rmsnorm_rope(plan_if(fused, sparse3d::Flag::qk_rmsnorm_rope_inplace), want_in, H,
                               D, &qg, &kg, &cos, &sin);
      const Tensor got =
          ops::qk_rmsnorm_rope((fused ? plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope,
                                                 sparse3d::Flag::qk_rmsnorm_rope_inplace})
                                      : plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope})),
                               got_in, H, D, &qg, &kg, &cos, &sin);
      EXPECT_TRUE(testing::bitwise_equal(got, want)) << "D " << D << " fused " << fused;
    }
    EXPECT_EQ(fallbacks_of("fast_qk_rmsnorm_rope"), 2u) << D;
    EXPECT_EQ(fallbacks_of("qk_rmsnorm_rope_inplace"), twin_falls_back ? 2u : 0u) << D;

    // The cross-attention's q: the same rule, its own flag.
    Tensor q = random_tensor({T, C}, DType::BF16, 3204 + D, 2.0f);
    for (bool fused : {false, true}) {
      Tensor want_in = copy_of(q), got_in = copy_of(q);
      const Tensor want = ops::qk_rmsnorm_cross(
          plan_if(fused, sparse3d::Flag::qk_rmsnorm_cross_inplace), want_in, qg, H, D);
      const Tensor got =
          ops::qk_rmsnorm_cross((fused ? plan_of({sparse3d::Flag::fast_qk_rmsnorm_cross,
                                                  sparse3d::Flag::qk_rmsnorm_cross_inplace})
                                       : plan_of({sparse3d::Flag::fast_qk_rmsnorm_cross})),
                                got_in, qg, H, D);
      EXPECT_TRUE(testing::bitwise_equal(got, want)) << "cross D " << D << " fused " << fused;
    }
    EXPECT_EQ(fallbacks_of("fast_qk_rmsnorm_cross"), 2u) << D;
    EXPECT_TRUE(throws_error([&] { kernels::fast::qk_rmsnorm_cross(q, qg, H, D); },
                             {"fast qk_rmsnorm_cross", "unsupported", reason}));
  }
  // A view starting 2 bytes into its storage: not 16-byte aligned.
  Tensor big = random_tensor({4 * 64 + 1}, DType::BF16, 3300);
  Tensor odd = big.rows(1, 4 * 64 + 1).reshape({4, 64});
  Tensor g64 = random_tensor({1, 64}, DType::F32, 3301);
  EXPECT_NE(kernels::fast::qk_unsupported(odd, 64, 1, 64, &g64, nullptr, nullptr, nullptr), "");
  EXPECT_TRUE(throws_error([&] { kernels::fast::qk_rmsnorm_cross(odd, g64, 1, 64); },
                           {"fast qk_rmsnorm_cross", "16-byte"}));
}

// bench-kernels states the tolerance rows' target with them, and a refused candidate as
// refused (the rows come from ops::measure_bandwidth on a GPU).
TEST_F(FastNormCpu, BenchKernelsReportNamesTheToleranceTarget) {
  bench::KernelBandwidthReport r;
  r.date = "2026-11-30T00:00:00Z";
  r.measured.copy_bytes = 2e9;
  r.measured.copy_seconds = 5e-4;
  r.measured.rows.push_back(
      {"modulated_layernorm", "modulated_layernorm", "bitwise", 30227, 1.9e8, 1.7e-4, ""});
  EXPECT_EQ(bench::to_markdown(r).find("Role \"tolerance\""), std::string::npos);
  r.measured.rows.push_back(
      {"modulated_layernorm", "fast_modulated_layernorm", "tolerance", 30227, 1.9e8, 5e-5, ""});
  r.measured.rows.push_back({"qk_rmsnorm_rope", "fast_qk_rmsnorm_rope", "tolerance", 30227, 1.9e8,
                             0, "head_dim 264 exceeds 256"});
  const std::string md = bench::to_markdown(r);
  EXPECT_NE(md.find("| modulated_layernorm | fast_modulated_layernorm | tolerance | 30,227 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("target >= 80% of the copy bandwidth at 30,227 tokens"), std::string::npos);
  EXPECT_NE(md.find("refused: head_dim 264 exceeds 256"), std::string::npos) << md;
  const io::Json j = bench::to_json(r);
  EXPECT_EQ(j["rows"][2]["skipped"], "head_dim 264 exceeds 256");
  EXPECT_EQ(j["rows"][1]["candidate"], "fast_modulated_layernorm");
}

}  // namespace
}  // namespace s3d
