// The tolerance candidates of the norm ops (src/kernels/fast_norm.h), on the test device
// (tests/device_under_test.h): each op (ops/), run with its tolerance candidate on, against
// the fp64 golden (computed on the host from the same inputs) under the fp64-golden rule
// (tests/fast_norm_golden.h), r being the reference chain's output on the same device, on
// random non-zero inputs: token counts 1, 3, 37, 1001, widths 8, 24, 1536, 1544, head dims 8,
// 24, 64, 128, several assets with random batch indices, gamma and the modulation far from
// trivial; poisoned outputs; the support rules (refused shape: the kernel throws and writes
// nothing, the op falls back, counted, with the bitwise op's bits). On the GPU also: the
// model's token counts (3,664 and 30,227 at C 1536, H 12, D 128), and the fast kernel's CPU
// version as the oracle (rel L2 <= 1e-3; the number of elements that differ at all is
// printed: the CPU adds in the GPU's lane order, so it is expected to be small).
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "contract/fallback.h"
#include "cpu/kernel_test_util.h"
#include "device_contract.h"
#include "device_under_test.h"
#include "fast_norm_golden.h"
#include "kernels/elementwise.h"
#include "kernels/fast_norm.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "ops_plan.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using sparse3d::Flag;
using test::fallbacks_of;
using test::kTestDevice;
using test::plan_if;
using test::plan_of;
using test::random_tensor;
using test::throws_error;
using testing::copy_of;
using testing::count_poisoned;
using testing::Golden;

constexpr bool kOnCuda = kTestDevice == Device::CUDA;

constexpr int kH = 12, kD = 128;
constexpr int64_t kC = int64_t{kH} * kD;  // 1536
const std::vector<int64_t> kTokens = {1, 3, 37, 1001};
// The model's token counts, on the GPU only: there the CPU version of every kernel runs too,
// as the oracle; the CPU binary covers its code paths with the counts above.
const std::vector<int64_t> kModelTokens =
    kOnCuda ? std::vector<int64_t>{3664, 30227} : std::vector<int64_t>{};

// A host tensor's copy on the test device (always a new buffer, on the CPU too).
Tensor on_dev(const Tensor& host) { return host.to(kTestDevice); }

// A bf16 tensor on the test device with every element poisoned.
Tensor poisoned_dev(const Shape& shape) {
  return test::poisoned(shape, DType::BF16, kTestDevice);
}

std::string on_device(const std::string& what) {
  return cat(what, " on ", device_name(kTestDevice));
}

// The GPU's fast result against the fast kernel's CPU version: a tolerance, with the bitwise
// share printed.
::testing::AssertionResult close_to_cpu(const std::vector<float>& gpu,
                                        const std::vector<float>& cpu, const std::string& what) {
  int64_t differ = 0;
  for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i)
    differ += !testing::bits_equal(gpu[i], cpu[i]);
  const double e = testing::rel_l2(gpu, cpu);
  std::cout << "[ backends ] " << what << ": rel L2 " << e << ", " << differ << " of "
            << gpu.size() << " elements differ\n";
  if (gpu.size() == cpu.size() && e <= 1e-3) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": GPU vs CPU rel L2 " << e << " > 1e-3";
}

struct FastNormOps : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

// ---- modulated LayerNorm ----

void check_modulated(int64_t T, int64_t C, int B, uint64_t seed) {
  const std::string what = on_device(cat("fast modulated_layernorm T ", T, " C ", C, " B ", B));
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 1, 0.5f);
  Tensor bidx = test::random_ints({T}, seed + 2, 0, B);
  const Tensor x_d = on_dev(x), mod_d = on_dev(mod), bidx_d = on_dev(bidx);
  const RowView sh = RowView::columns(mod, 3 * C, C), sc = RowView::columns(mod, 4 * C, C);
  const RowView sh_d = RowView::columns(mod_d, 3 * C, C), sc_d = RowView::columns(mod_d, 4 * C, C);
  // r: the reference chain.
  Tensor ref = poisoned_dev({T, C});
  ops::modulated_layernorm(plan_of({}), x_d, sh_d, sc_d, bidx_d, 1e-6f, ref);
  ASSERT_EQ(kernels::fast::modulated_layernorm_unsupported(x_d, sh_d, sc_d, ref), "") << what;
  Tensor got_d = poisoned_dev({T, C});
  ops::modulated_layernorm(
      plan_of({Flag::fast_modulated_layernorm, Flag::modulated_layernorm}), x_d, sh_d, sc_d,
      bidx_d, 1e-6f, got_d);
  EXPECT_EQ(count_poisoned(ref), 0) << what;
  EXPECT_EQ(count_poisoned(got_d), 0) << what;
  const Golden g = testing::golden_modulated_layernorm(x, sh, sc, bidx, 1e-6f);
  const std::vector<float> got = got_d.to(Device::CPU).to_floats();
  EXPECT_TRUE(testing::meets_golden_rule(g, ref.to(Device::CPU).to_floats(), got, what));
  // In place (out = x) gives the same bits: each row is read whole before it is written.
  Tensor xi = on_dev(x);
  kernels::fast::modulated_layernorm(xi, sh_d, sc_d, bidx_d, 1e-6f, xi);
  EXPECT_TRUE(testing::bitwise_equal(xi, got_d)) << what << ": in place";
  if (!kOnCuda) return;  // on the CPU the fast kernel is its own CPU version
  Tensor got_h = test::poisoned({T, C}, DType::BF16, Device::CPU);
  kernels::fast::modulated_layernorm(x, sh, sc, bidx, 1e-6f, got_h);
  EXPECT_TRUE(close_to_cpu(got, got_h.to_floats(), what));
}

TEST_F(FastNormOps, ModulatedLayerNormMeetsTheGoldenRule) {
  S3D_TEST_DEVICE();
  for (int64_t T : kTokens) {
    check_modulated(T, 8, 1, 1000 + T);
    check_modulated(T, 24, 3, 1010 + T);    // fewer chunks than lanes
    check_modulated(T, 1544, 3, 1020 + T);  // 193 chunks: 7 per lane, not all lanes full
    check_modulated(T, kC, 2, 1030 + T);    // the model's width: 6 chunks per lane
  }
  check_modulated(5, 4096, 2, 1040);  // the widest row the kernel holds: 16 chunks per lane
  for (int64_t T : kModelTokens) check_modulated(T, kC, 3, 4050 + T);
  EXPECT_EQ(fallbacks_of("fast_modulated_layernorm"), 0u);
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 0u);
  EXPECT_TRUE(contract::fallback_counts().empty());
}

// A row far from zero mean: the fp32 two-pass statistics keep the rule (a one-pass
// E[x^2] - mean^2 would cancel here).
TEST_F(FastNormOps, ModulatedLayerNormKeepsTheRuleOnAnOffsetRow) {
  S3D_TEST_DEVICE();
  const int64_t T = 37, C = kC;
  Tensor x = random_tensor({T, C}, DType::BF16, 1050, 0.05f, 30.0f);
  Tensor mod = random_tensor({2, 6 * C}, DType::BF16, 1051, 0.5f);
  Tensor bidx = test::random_ints({T}, 1052, 0, 2);
  const Tensor x_d = on_dev(x), mod_d = on_dev(mod), bidx_d = on_dev(bidx);
  const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
  const RowView sh_d = RowView::columns(mod_d, 0, C), sc_d = RowView::columns(mod_d, C, C);
  Tensor ref = poisoned_dev({T, C}), got = poisoned_dev({T, C});
  ops::modulated_layernorm(plan_of({}), x_d, sh_d, sc_d, bidx_d, 1e-6f, ref);
  ops::modulated_layernorm(plan_of({Flag::fast_modulated_layernorm}), x_d, sh_d, sc_d, bidx_d,
                           1e-6f, got);
  EXPECT_EQ(count_poisoned(got), 0);
  const Golden g = testing::golden_modulated_layernorm(x, shift, scale, bidx, 1e-6f);
  EXPECT_TRUE(testing::meets_golden_rule(g, ref.to(Device::CPU).to_floats(),
                                         got.to(Device::CPU).to_floats(),
                                         on_device("offset rows")));
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormOps, ModulatedLayerNormRefusesUnsupportedWidthsAndFallsBack) {
  S3D_TEST_DEVICE();
  // C = 12: not a multiple of 8 (the bitwise twin refuses it too, and falls back to the
  // chain); C = 4104: wider than a warp's registers (the bitwise fused kernel takes it).
  for (auto [C, reason, twin_falls_back] : {std::tuple{int64_t{12}, "multiple of 8", true},
                                            std::tuple{int64_t{4104}, "exceeds 4096", false}}) {
    contract::reset_fallbacks();
    const Tensor x = on_dev(random_tensor({3, C}, DType::BF16, 1100 + C, 2.0f, 0.5f));
    const Tensor mod = on_dev(random_tensor({2, 6 * C}, DType::BF16, 1101 + C, 0.5f));
    const Tensor bidx = on_dev(test::random_ints({3}, 1102, 0, 2));
    const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
    Tensor out = poisoned_dev({3, C});
    const std::string why = kernels::fast::modulated_layernorm_unsupported(x, shift, scale, out);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_TRUE(
        throws_error([&] { kernels::fast::modulated_layernorm(x, shift, scale, bidx, 1e-6f, out); },
                     {"fast modulated_layernorm", "unsupported", reason}));
    EXPECT_EQ(count_poisoned(out), 3 * C) << "a refused call writes nothing";
    for (bool fused : {false, true}) {
      Tensor want = poisoned_dev({3, C});
      ops::modulated_layernorm(plan_if(fused, Flag::modulated_layernorm), x, shift, scale, bidx,
                               1e-6f, want);
      Tensor got = poisoned_dev({3, C});
      ops::modulated_layernorm(
          (fused ? plan_of({Flag::fast_modulated_layernorm, Flag::modulated_layernorm})
                 : plan_of({Flag::fast_modulated_layernorm})),
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

// ---- q/k RMSNorm + RoPE ----

void check_qk(int64_t T, int H, int D, bool norm, bool rope, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  const std::string what =
      on_device(cat("fast qk T ", T, " H ", H, " D ", D, " norm ", norm, " rope ", rope));
  const testing::QkOperands o = testing::make_qk_operands(T, H, D, norm, seed);
  const Tensor &qkv = o.qkv, &qg = o.q_gamma, &kg = o.k_gamma, &cos = o.cos, &sin = o.sin;
  // Both backends from the same phases.
  const Tensor qg_d = on_dev(qg), kg_d = on_dev(kg), cos_d = on_dev(cos), sin_d = on_dev(sin);
  auto ptr = [](bool on, const Tensor& t) { return on ? &t : nullptr; };
  const Tensor *g0 = ptr(norm, qg_d), *g1 = ptr(norm, kg_d);
  const Tensor *c = ptr(rope, cos_d), *s = ptr(rope, sin_d);
  // r: the reference chain.
  Tensor ref_in = on_dev(qkv);
  const Tensor ref = ops::qk_rmsnorm_rope(plan_of({}), ref_in, H, D, g0, g1, c, s);
  ASSERT_EQ(kernels::fast::qk_unsupported(ref_in, 3 * C, H, D, g0, g1, c, s), "") << what;
  Tensor got_in = on_dev(qkv);
  const Tensor got_d = ops::qk_rmsnorm_rope(
      plan_of({Flag::fast_qk_rmsnorm_rope, Flag::qk_rmsnorm_rope_inplace}), got_in, H, D, g0, g1,
      c, s);
  EXPECT_EQ(got_d.data(), got_in.data()) << what << ": in place";
  const Golden g = testing::golden_qk(qkv, 2, H, D, ptr(norm, qg), ptr(norm, kg), ptr(rope, cos),
                                      ptr(rope, sin));
  const std::vector<float> got = testing::leading_columns(got_d, 2 * C);
  EXPECT_TRUE(testing::meets_golden_rule(g, testing::leading_columns(ref, 2 * C), got, what));
  // v is the input's.
  auto v_of = [&](const Tensor& packed) {
    const Tensor host = packed.to(Device::CPU);
    Tensor v = Tensor::empty({T, C}, DType::BF16, Device::CPU);
    RowView dst = RowView::of(v);
    kernels::copy_rows(RowView{host, 2 * C, T, C, 3 * C}, dst);
    return v;
  };
  EXPECT_TRUE(testing::bitwise_equal(v_of(got_d), v_of(qkv))) << what << ": v slot";
  if (!kOnCuda) return;  // on the CPU the fast kernel is its own CPU version
  Tensor qkv_h = copy_of(qkv);
  kernels::fast::qk_rmsnorm_rope(qkv_h, H, D, ptr(norm, qg), ptr(norm, kg), ptr(rope, cos),
                                 ptr(rope, sin));
  EXPECT_TRUE(close_to_cpu(got, testing::leading_columns(qkv_h, 2 * C), what));
}

TEST_F(FastNormOps, QkRmsNormRopeMeetsTheGoldenRule) {
  S3D_TEST_DEVICE();
  for (int64_t T : kTokens) {
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{kH, kD}}) {
      const uint64_t seed = 2000 + 10 * T + D;
      check_qk(T, H, D, true, true, seed);
      check_qk(T, H, D, true, false, seed + 3);  // ape models: norm only
      check_qk(T, H, D, false, true, seed + 6);  // no qk_rms_norm: RoPE only
    }
  }
  check_qk(7, 1, 256, true, true, 2900);  // the widest head the kernel holds
  check_qk(7, 2, 136, true, true, 2910);  // 17 chunks: lanes with 2 and 3 chunks
  for (int64_t T : kModelTokens) {
    check_qk(T, kH, kD, true, true, 5950 + T);
    check_qk(T, kH, kD, true, false, 5960 + T);
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormOps, QkRmsNormRopeWithNothingToDoReturnsItsInput) {
  S3D_TEST_DEVICE();
  const Tensor before = random_tensor({3, 3 * 16}, DType::BF16, 2950);
  Tensor qkv = on_dev(before);
  Tensor got = ops::qk_rmsnorm_rope(
      plan_of({Flag::fast_qk_rmsnorm_rope, Flag::qk_rmsnorm_rope_inplace}), qkv, 2, 8, nullptr,
      nullptr, nullptr, nullptr);
  EXPECT_EQ(got.data(), qkv.data());
  EXPECT_TRUE(testing::bitwise_equal(qkv, before));
  EXPECT_TRUE(throws_error(
      [&] { kernels::fast::qk_rmsnorm_rope(qkv, 2, 8, nullptr, nullptr, nullptr, nullptr); },
      {"fast qk_rmsnorm_rope", "nothing to do"}));
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormOps, CrossQRmsNormMeetsTheGoldenRule) {
  S3D_TEST_DEVICE();
  auto check = [](int64_t T, int H, int D, uint64_t seed) {
    const std::string what = on_device(cat("fast cross_q_rmsnorm T ", T, " H ", H, " D ", D));
    Tensor q = random_tensor({T, int64_t{H} * D}, DType::BF16, seed, 2.0f, -0.2f);
    Tensor gm = random_tensor({H, D}, DType::F32, seed + 100, 0.3f, 1.0f);
    const Tensor gm_d = on_dev(gm);
    Tensor ref_in = on_dev(q);
    const Tensor ref = ops::qk_rmsnorm_cross(plan_of({}), ref_in, gm_d, H, D);
    Tensor got_in = on_dev(q);
    const Tensor got_d = ops::qk_rmsnorm_cross(
        plan_of({Flag::fast_qk_rmsnorm_cross, Flag::qk_rmsnorm_cross_inplace}), got_in, gm_d, H,
        D);
    EXPECT_EQ(got_d.data(), got_in.data()) << what << ": in place";
    const Golden g = testing::golden_qk(q, 1, H, D, &gm, nullptr, nullptr, nullptr);
    const std::vector<float> got = got_d.to(Device::CPU).to_floats();
    EXPECT_TRUE(testing::meets_golden_rule(g, ref.to(Device::CPU).to_floats(), got, what));
    if (!kOnCuda) return;  // on the CPU the fast kernel is its own CPU version
    Tensor q_h = copy_of(q);
    kernels::fast::qk_rmsnorm_cross(q_h, gm, H, D);
    EXPECT_TRUE(close_to_cpu(got, q_h.to_floats(), what));
  };
  for (int64_t T : kTokens) {
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{kH, kD}})
      check(T, H, D, 3000 + T + D);
  }
  for (int64_t T : kModelTokens) check(T, kH, kD, 6100 + T);
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST_F(FastNormOps, QkKernelsRefuseUnsupportedShapesAndTheEntryPointsFallBack) {
  S3D_TEST_DEVICE();
  // head_dim 12: not a multiple of 8 (the bitwise twin refuses it too); head_dim 264: wider
  // than 8 lanes' registers (the bitwise fused kernel takes it).
  for (auto [D, reason, twin_falls_back] :
       {std::tuple{12, "multiple of 8", true}, std::tuple{264, "exceeds 256", false}}) {
    contract::reset_fallbacks();
    const int H = 2;
    const int64_t C = int64_t{H} * D, T = 3;
    const Tensor qkv = random_tensor({T, 3 * C}, DType::BF16, 3200 + D, 1.5f);
    const Tensor qg = on_dev(random_tensor({H, D}, DType::F32, 3201 + D, 0.3f, 1.0f));
    const Tensor kg = on_dev(random_tensor({H, D}, DType::F32, 3202 + D, 0.3f, 1.0f));
    Tensor cos_h = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
    Tensor sin_h = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
    kernels::rope_phases(test::random_coords(T, 3203), D, 1.0f, 10000.0f, cos_h, sin_h);
    const Tensor cos = on_dev(cos_h), sin = on_dev(sin_h);
    Tensor untouched = on_dev(qkv);
    const std::string why =
        kernels::fast::qk_unsupported(untouched, 3 * C, H, D, &qg, &kg, &cos, &sin);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_TRUE(
        throws_error([&] { kernels::fast::qk_rmsnorm_rope(untouched, H, D, &qg, &kg, &cos, &sin); },
                     {"fast qk_rmsnorm_rope", "unsupported", reason}));
    EXPECT_TRUE(testing::bitwise_equal(untouched, qkv)) << "a refused call writes nothing";
    for (bool fused : {false, true}) {
      Tensor want_in = on_dev(qkv), got_in = on_dev(qkv);
      const Tensor want = ops::qk_rmsnorm_rope(plan_if(fused, Flag::qk_rmsnorm_rope_inplace),
                                               want_in, H, D, &qg, &kg, &cos, &sin);
      const Tensor got = ops::qk_rmsnorm_rope(
          (fused ? plan_of({Flag::fast_qk_rmsnorm_rope, Flag::qk_rmsnorm_rope_inplace})
                 : plan_of({Flag::fast_qk_rmsnorm_rope})),
          got_in, H, D, &qg, &kg, &cos, &sin);
      EXPECT_TRUE(testing::bitwise_equal(got, want)) << "D " << D << " fused " << fused;
    }
    EXPECT_EQ(fallbacks_of("fast_qk_rmsnorm_rope"), 2u) << D;
    EXPECT_EQ(fallbacks_of("qk_rmsnorm_rope_inplace"), twin_falls_back ? 2u : 0u) << D;

    // The cross-attention's q: the same rule, its own flag.
    const Tensor q_h = random_tensor({T, C}, DType::BF16, 3204 + D, 2.0f);
    Tensor q = on_dev(q_h);
    for (bool fused : {false, true}) {
      Tensor want_in = on_dev(q_h), got_in = on_dev(q_h);
      const Tensor want = ops::qk_rmsnorm_cross(plan_if(fused, Flag::qk_rmsnorm_cross_inplace),
                                                want_in, qg, H, D);
      const Tensor got = ops::qk_rmsnorm_cross(
          (fused ? plan_of({Flag::fast_qk_rmsnorm_cross, Flag::qk_rmsnorm_cross_inplace})
                 : plan_of({Flag::fast_qk_rmsnorm_cross})),
          got_in, qg, H, D);
      EXPECT_TRUE(testing::bitwise_equal(got, want)) << "cross D " << D << " fused " << fused;
    }
    EXPECT_EQ(fallbacks_of("fast_qk_rmsnorm_cross"), 2u) << D;
    EXPECT_TRUE(throws_error([&] { kernels::fast::qk_rmsnorm_cross(q, qg, H, D); },
                             {"fast qk_rmsnorm_cross", "unsupported", reason}));
    EXPECT_TRUE(testing::bitwise_equal(q, q_h)) << "a refused call writes nothing";
  }
  // A view starting 2 bytes into its storage: not 16-byte aligned.
  Tensor big = on_dev(random_tensor({4 * 64 + 1}, DType::BF16, 3300));
  Tensor odd = big.rows(1, 4 * 64 + 1).reshape({4, 64});
  const Tensor g64 = on_dev(random_tensor({1, 64}, DType::F32, 3301));
  EXPECT_NE(kernels::fast::qk_unsupported(odd, 64, 1, 64, &g64, nullptr, nullptr, nullptr), "");
  EXPECT_TRUE(throws_error([&] { kernels::fast::qk_rmsnorm_cross(odd, g64, 1, 64); },
                           {"fast qk_rmsnorm_cross", "16-byte"}));
}

// Refused shapes at more tokens, every candidate on: each refusal counted once, under its
// flag, and the bitwise fused kernel's bits (the bitwise candidate accepts these widths).
TEST_F(FastNormOps, RefusedShapesFallBackToTheBitwiseCandidateCountedOnce) {
  S3D_TEST_DEVICE();
  const int64_t T = 37, C = 4104;  // wider than a warp's registers; the bitwise kernel takes it
  const Tensor x = on_dev(random_tensor({T, C}, DType::BF16, 6200, 2.0f, 0.5f));
  const Tensor mod = on_dev(random_tensor({2, 6 * C}, DType::BF16, 6201, 0.5f));
  const Tensor bidx = on_dev(test::random_ints({T}, 6202, 0, 2));
  const RowView sh = RowView::columns(mod, 0, C), sc = RowView::columns(mod, C, C);
  Tensor want = poisoned_dev({T, C});
  ops::modulated_layernorm(plan_of({Flag::modulated_layernorm}), x, sh, sc, bidx, 1e-6f, want);
  Tensor got = poisoned_dev({T, C});
  ops::modulated_layernorm(plan_of({Flag::fast_modulated_layernorm, Flag::modulated_layernorm}),
                           x, sh, sc, bidx, 1e-6f, got);
  EXPECT_EQ(count_poisoned(got), 0);
  EXPECT_TRUE(testing::bitwise_equal(got, want));
  const int H = 2, D = 264;  // wider than 8 lanes' registers
  const Tensor qkv = random_tensor({T, 3 * int64_t{H} * D}, DType::BF16, 6203, 1.5f);
  const Tensor qg = on_dev(random_tensor({H, D}, DType::F32, 6204, 0.3f, 1.0f));
  Tensor want_in = on_dev(qkv), got_in = on_dev(qkv);
  const Tensor want_qk = ops::qk_rmsnorm_rope(plan_of({Flag::qk_rmsnorm_rope_inplace}), want_in,
                                              H, D, &qg, &qg, nullptr, nullptr);
  const Tensor got_qk = ops::qk_rmsnorm_rope(
      plan_of({Flag::fast_qk_rmsnorm_rope, Flag::qk_rmsnorm_rope_inplace}), got_in, H, D, &qg,
      &qg, nullptr, nullptr);
  EXPECT_TRUE(testing::bitwise_equal(got_qk, want_qk));
  const auto counts = contract::fallback_counts();
  ASSERT_EQ(counts.size(), 2u) << contract::format_fallbacks(counts);
  for (const auto& c : counts) {
    EXPECT_TRUE(c.optimization == "fast_modulated_layernorm" ||
                c.optimization == "fast_qk_rmsnorm_rope")
        << c.optimization;
    EXPECT_EQ(c.count, 1u) << c.optimization;
  }
}

}  // namespace
}  // namespace s3d
