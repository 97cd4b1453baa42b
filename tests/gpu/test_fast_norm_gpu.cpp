// Tolerance kernels (src/kernels/fast_norm.h) on the GPU. Each op (ops/), its tolerance
// candidate on, against the fp64 golden (computed on the host from the same inputs) under the
// fp64-golden rule, r being the GPU's bitwise fused kernel (bitwise to the GPU reference
// chain), and against the fast kernel's CPU version (rel L2 <= 1e-3; the number of elements
// that differ at all is printed: the CPU adds in the GPU's lane order, so it is expected to
// be small). Token counts 1, 3, 37, 1001 at several widths and head dims, and 3,664 and
// 30,227 at the model's (C 1536, H 12, D 128); poisoned outputs; no fallback counted.
//
// Run with build/bin/sparse3d_gpu_tests --gtest_filter='FastNorm*'
#include <gtest/gtest.h>

#include <iostream>

#include "../ops_plan.h"
#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "fast_norm_golden.h"
#include "gpu_test_util.h"
#include "kernels/fast_norm.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using test::plan_if;
using test::plan_of;

using test::on_gpu;
using test::random_tensor;
using testing::copy_of;
using testing::count_poisoned;
using testing::Golden;

constexpr int kH = 12, kD = 128;
constexpr int64_t kC = int64_t{kH} * kD;  // 1536
const std::vector<int64_t> kSmallTokens = {1, 3, 37, 1001};
const std::vector<int64_t> kModelTokens = {3664, 30227};

// GPU fast against the CPU fast version: a tolerance, with the bitwise share printed.
::testing::AssertionResult close_to_cpu(const std::vector<float>& gpu, const std::vector<float>& cpu,
                                        const std::string& what) {
  int64_t differ = 0;
  for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i) differ += !testing::bits_equal(gpu[i], cpu[i]);
  const double e = testing::rel_l2(gpu, cpu);
  std::cout << "[ backends ] " << what << ": rel L2 " << e << ", " << differ << " of "
            << gpu.size() << " elements differ\n";
  if (gpu.size() == cpu.size() && e <= 1e-3) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": GPU vs CPU rel L2 " << e << " > 1e-3";
}

// ---- modulated LayerNorm ----

void check_modulated(int64_t T, int64_t C, int B, uint64_t seed) {
  const std::string what = cat("fast modulated_layernorm T ", T, " C ", C, " B ", B);
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 1, 0.5f);
  Tensor bidx = test::random_ints({T}, seed + 2, 0, B);
  Tensor x_d = on_gpu(x), mod_d = on_gpu(mod), bidx_d = on_gpu(bidx);
  const RowView sh = RowView::columns(mod, 3 * C, C), sc = RowView::columns(mod, 4 * C, C);
  const RowView sh_d = RowView::columns(mod_d, 3 * C, C), sc_d = RowView::columns(mod_d, 4 * C, C);
  // r: the GPU's bitwise fused kernel.
  Tensor ref_d = test::poisoned({T, C}, DType::BF16, Device::CUDA);
  ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x_d, sh_d, sc_d, bidx_d,
                           1e-6f, ref_d);
  ASSERT_EQ(kernels::fast::modulated_layernorm_unsupported(x_d, sh_d, sc_d, ref_d), "") << what;
  Tensor got_d = test::poisoned({T, C}, DType::BF16, Device::CUDA);
  ops::modulated_layernorm(
      plan_of({sparse3d::Flag::fast_modulated_layernorm, sparse3d::Flag::modulated_layernorm}), x_d,
      sh_d, sc_d, bidx_d, 1e-6f, got_d);
  EXPECT_EQ(count_poisoned(ref_d), 0) << what;
  EXPECT_EQ(count_poisoned(got_d), 0) << what;
  const Golden g = testing::golden_modulated_layernorm(x, sh, sc, bidx, 1e-6f);
  const std::vector<float> got = got_d.to(Device::CPU).to_floats();
  EXPECT_TRUE(testing::meets_golden_rule(g, ref_d.to(Device::CPU).to_floats(), got, what));
  Tensor got_h = test::poisoned({T, C}, DType::BF16, Device::CPU);
  kernels::fast::modulated_layernorm(x, sh, sc, bidx, 1e-6f, got_h);
  EXPECT_TRUE(close_to_cpu(got, got_h.to_floats(), what));
  // In place gives the same bits.
  Tensor xi_d = on_gpu(x);
  kernels::fast::modulated_layernorm(xi_d, sh_d, sc_d, bidx_d, 1e-6f, xi_d);
  EXPECT_TRUE(testing::bitwise_equal(xi_d, got_d)) << what << ": in place";
}

TEST(FastNormGpu, ModulatedLayerNorm) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kSmallTokens) {
    check_modulated(T, 8, 1, 4000 + T);
    check_modulated(T, 24, 3, 4010 + T);
    check_modulated(T, 1544, 3, 4020 + T);
    check_modulated(T, 1536, 2, 4030 + T);
  }
  check_modulated(5, 4096, 2, 4040);  // 16 chunks per lane, modulation loaded late
  for (int64_t T : kModelTokens) check_modulated(T, kC, 3, 4050 + T);
  EXPECT_TRUE(contract::fallback_counts().empty());
}

// ---- q/k RMSNorm + RoPE ----

void check_qk(int64_t T, int H, int D, bool norm, bool rope, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  const std::string what = cat("fast qk T ", T, " H ", H, " D ", D, " norm ", norm, " rope ", rope);
  const testing::QkOperands o = testing::make_qk_operands(T, H, D, norm, seed);
  const Tensor &qkv = o.qkv, &qg = o.q_gamma, &kg = o.k_gamma, &cos = o.cos, &sin = o.sin;
  // Both backends from the same phases.
  Tensor qg_d = on_gpu(qg), kg_d = on_gpu(kg), cos_d = on_gpu(cos), sin_d = on_gpu(sin);
  auto ptr = [](bool on, const Tensor& t) { return on ? &t : nullptr; };

  Tensor ref_d = on_gpu(qkv);
  ops::qk_rmsnorm_rope(plan_of({sparse3d::Flag::qk_rmsnorm_rope_inplace}), ref_d, H, D,
                       ptr(norm, qg_d), ptr(norm, kg_d), ptr(rope, cos_d),
                       ptr(rope, sin_d));  // r: the bitwise fused kernel, in place
  ASSERT_EQ(kernels::fast::qk_unsupported(ref_d, 3 * C, H, D, ptr(norm, qg_d), ptr(norm, kg_d),
                                          ptr(rope, cos_d), ptr(rope, sin_d)),
            "");
  Tensor qkv_d = on_gpu(qkv);
  Tensor got_d = ops::qk_rmsnorm_rope(
      plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope, sparse3d::Flag::qk_rmsnorm_rope_inplace}),
      qkv_d, H, D, ptr(norm, qg_d), ptr(norm, kg_d), ptr(rope, cos_d), ptr(rope, sin_d));
  EXPECT_EQ(got_d.data(), qkv_d.data()) << what << ": in place";
  const Golden g = testing::golden_qk(qkv, 2, H, D, ptr(norm, qg), ptr(norm, kg), ptr(rope, cos),
                                      ptr(rope, sin));
  const std::vector<float> got = testing::leading_columns(got_d, 2 * C);
  EXPECT_TRUE(testing::meets_golden_rule(g, testing::leading_columns(ref_d, 2 * C), got, what));
  Tensor qkv_h = copy_of(qkv);
  kernels::fast::qk_rmsnorm_rope(qkv_h, H, D, ptr(norm, qg), ptr(norm, kg), ptr(rope, cos),
                                 ptr(rope, sin));
  EXPECT_TRUE(close_to_cpu(got, testing::leading_columns(qkv_h, 2 * C), what));
  // v untouched.
  const Tensor all = got_d.to(Device::CPU);
  const auto* a = all.data_as<uint16_t>();
  const auto* b = qkv.data_as<uint16_t>();
  int64_t v_changed = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 2 * C; c < 3 * C; ++c) v_changed += a[t * 3 * C + c] != b[t * 3 * C + c];
  EXPECT_EQ(v_changed, 0) << what << ": v slot";
}

TEST(FastNormGpu, QkRmsNormRope) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  for (int64_t T : kSmallTokens) {
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{12, 128}}) {
      const uint64_t seed = 5000 + 10 * T + D;
      check_qk(T, H, D, true, true, seed);
      check_qk(T, H, D, true, false, seed + 3);
      check_qk(T, H, D, false, true, seed + 6);
    }
  }
  check_qk(7, 1, 256, true, true, 5900);
  check_qk(7, 2, 136, true, true, 5910);
  for (int64_t T : kModelTokens) {
    check_qk(T, kH, kD, true, true, 5950 + T);
    check_qk(T, kH, kD, true, false, 5960 + T);
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

TEST(FastNormGpu, CrossQRmsNorm) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  auto check = [](int64_t T, int H, int D, uint64_t seed) {
    const std::string what = cat("fast cross_q_rmsnorm T ", T, " H ", H, " D ", D);
    Tensor q = random_tensor({T, int64_t{H} * D}, DType::BF16, seed, 2.0f, -0.2f);
    Tensor gm = random_tensor({H, D}, DType::F32, seed + 1, 0.3f, 1.0f);
    Tensor gm_d = on_gpu(gm);
    Tensor ref_d = on_gpu(q);
    ops::qk_rmsnorm_cross(plan_of({sparse3d::Flag::qk_rmsnorm_cross_inplace}), ref_d, gm_d, H,
                          D);  // r: the bitwise fused kernel
    Tensor q_d = on_gpu(q);
    Tensor got_d = ops::qk_rmsnorm_cross(
        plan_of({sparse3d::Flag::fast_qk_rmsnorm_cross, sparse3d::Flag::qk_rmsnorm_cross_inplace}),
        q_d, gm_d, H, D);
    EXPECT_EQ(got_d.data(), q_d.data()) << what << ": in place";
    const Golden g = testing::golden_qk(q, 1, H, D, &gm, nullptr, nullptr, nullptr);
    const std::vector<float> got = got_d.to(Device::CPU).to_floats();
    EXPECT_TRUE(testing::meets_golden_rule(g, ref_d.to(Device::CPU).to_floats(), got, what));
    Tensor q_h = copy_of(q);
    kernels::fast::qk_rmsnorm_cross(q_h, gm, H, D);
    EXPECT_TRUE(close_to_cpu(got, q_h.to_floats(), what));
  };
  for (int64_t T : kSmallTokens)
    for (auto [H, D] : {std::pair{2, 8}, std::pair{3, 24}, std::pair{2, 64}, std::pair{12, 128}})
      check(T, H, D, 6000 + T + D);
  for (int64_t T : kModelTokens) check(T, kH, kD, 6100 + T);
  EXPECT_TRUE(contract::fallback_counts().empty());
}

// A refused shape on the GPU: counted, and the bitwise entry point's bits.
TEST(FastNormGpu, RefusedShapesFallBack) {
  S3D_REQUIRE_CUDA();
  contract::reset_fallbacks();
  const int64_t T = 37, C = 4104;  // wider than a warp's registers; the bitwise kernel takes it
  Tensor x_d = on_gpu(random_tensor({T, C}, DType::BF16, 6200, 2.0f, 0.5f));
  Tensor mod_d = on_gpu(random_tensor({2, 6 * C}, DType::BF16, 6201, 0.5f));
  Tensor bidx_d = on_gpu(test::random_ints({T}, 6202, 0, 2));
  const RowView sh_d = RowView::columns(mod_d, 0, C), sc_d = RowView::columns(mod_d, C, C);
  Tensor want_d = test::poisoned({T, C}, DType::BF16, Device::CUDA);
  ops::modulated_layernorm(plan_of({sparse3d::Flag::modulated_layernorm}), x_d, sh_d, sc_d, bidx_d,
                           1e-6f, want_d);
  Tensor got_d = test::poisoned({T, C}, DType::BF16, Device::CUDA);
  ops::modulated_layernorm(
      plan_of({sparse3d::Flag::fast_modulated_layernorm, sparse3d::Flag::modulated_layernorm}), x_d,
      sh_d, sc_d, bidx_d, 1e-6f, got_d);
  EXPECT_TRUE(testing::bitwise_equal(got_d, want_d));
  const int H = 2, D = 264;  // wider than 8 lanes' registers
  Tensor qkv = random_tensor({T, 3 * int64_t{H} * D}, DType::BF16, 6203, 1.5f);
  Tensor qg_d = on_gpu(random_tensor({H, D}, DType::F32, 6204, 0.3f, 1.0f));
  Tensor want_in = on_gpu(qkv), got_in = on_gpu(qkv);
  const Tensor want = ops::qk_rmsnorm_rope(plan_of({sparse3d::Flag::qk_rmsnorm_rope_inplace}),
                                           want_in, H, D, &qg_d, &qg_d, nullptr, nullptr);
  const Tensor got = ops::qk_rmsnorm_rope(
      plan_of({sparse3d::Flag::fast_qk_rmsnorm_rope, sparse3d::Flag::qk_rmsnorm_rope_inplace}),
      got_in, H, D, &qg_d, &qg_d, nullptr, nullptr);
  EXPECT_TRUE(testing::bitwise_equal(got, want));
  const auto counts = contract::fallback_counts();
  ASSERT_EQ(counts.size(), 2u);
  for (const auto& c : counts) {
    EXPECT_TRUE(c.optimization == "fast_modulated_layernorm" || c.optimization == "fast_qk_rmsnorm_rope")
        << c.optimization;
    EXPECT_EQ(c.count, 1u) << c.optimization;
  }
}

}  // namespace
}  // namespace s3d
