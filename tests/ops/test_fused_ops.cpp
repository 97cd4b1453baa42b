// The bitwise fused candidates of the op families (kernels::fused::), on the test device
// (tests/device_under_test.h): each op (ops/) with its fused candidate against the same op's
// reference chain (the plan with no candidate, what pure_eager ships) on the same device,
// bitwise, on random non-zero inputs with odd token counts and widths; shapes the fused
// kernels refuse (the kernel throws, the op falls back, counted); poisoned outputs; the
// gemm_gelu_epilogue tolerance (tests/gelu_epilogue_contract.h) and its fp64 golden. On the
// GPU also: the model's token counts (1000 and 30227 at C 1536, H 12, D 128), and the fused
// kernel's CPU version as the oracle under the contract the reference ops have between the
// backends (bitwise, or 1 bf16 ulp where a reduction or a transcendental is involved).
// The model-level checks are in tests/device/test_fused_model.cpp (both backends),
// tests/cpu/test_kernels_fused.cpp and tests/gpu/test_kernels_fused_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "contract/fallback.h"
#include "core/bf16.h"
#include "cpu/kernel_test_util.h"
#include "device_contract.h"
#include "device_under_test.h"
#include "gelu_epilogue_contract.h"
#include "gemm/linear.h"
#include "gpu/epilogue_error.h"
#include "kernels/elementwise.h"
#include "kernels/gated_residual_add.h"
#include "kernels/gelu_tanh.h"
#include "kernels/layernorm.h"
#include "kernels/modulated_layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_rmsnorm.h"
#include "model_inputs.h"
#include "null_context_checks.h"
#include "ops/gated_residual_add.h"
#include "ops/linear_gelu.h"
#include "ops/modulated_layernorm.h"
#include "ops/qk_rmsnorm_cross.h"
#include "ops/qk_rmsnorm_rope.h"
#include "ops_plan.h"
#include "sparse3d/flags.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using sparse3d::Flag;
using test::Contract;
using test::fallbacks_of;
using test::kTestDevice;
using test::meets;
using test::plan_if;
using test::plan_of;
using test::random_tensor;
using test::throws_error;
using testing::batch_runs;
using testing::copy_of;
using testing::count_poisoned;
using testing::same_bits;

constexpr bool kOnCuda = kTestDevice == Device::CUDA;

// The model's shapes: C 1536 = H 12 x D 128.
constexpr int kH = 12, kD = 128;
constexpr int64_t kC = int64_t{kH} * kD;

// Odd token counts, on both backends.
const std::vector<int64_t> kSmallTokens = {1, 7, 33};
// The model's token counts, on the GPU only: there the CPU version of every kernel runs too,
// as the oracle; the CPU binary covers its code paths with the small counts.
const std::vector<int64_t> kLargeTokens =
    kOnCuda ? std::vector<int64_t>{1000, 30227} : std::vector<int64_t>{};

std::vector<int64_t> all_tokens() {
  std::vector<int64_t> t = kSmallTokens;
  t.insert(t.end(), kLargeTokens.begin(), kLargeTokens.end());
  return t;
}

// A host tensor's copy on the test device (always a new buffer, on the CPU too).
Tensor on_dev(const Tensor& host) { return host.to(kTestDevice); }

// A bf16 tensor on the test device with every element poisoned.
Tensor poisoned_dev(const Shape& shape) {
  return test::poisoned(shape, DType::BF16, kTestDevice);
}

std::string on_device(const std::string& what) {
  return cat(what, " on ", device_name(kTestDevice));
}

struct FusedOps : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

// ---- qk_rmsnorm_rope ----

void check_qk(int64_t T, int H, int D, bool norm, bool rope, uint64_t seed) {
  const int64_t C = int64_t{H} * D;
  const std::string what =
      on_device(cat("qk_rmsnorm_rope T ", T, " H ", H, " D ", D, " norm ", norm, " rope ", rope));
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
  // Both backends from the same phases (rope_phases itself is a 1-ulp op between them).
  const Tensor qg_d = on_dev(qg), kg_d = on_dev(kg), cos_d = on_dev(cos), sin_d = on_dev(sin);
  auto ptr = [](bool on, const Tensor& t) { return on ? &t : nullptr; };
  const Tensor *g0 = ptr(norm, qg_d), *g1 = ptr(norm, kg_d);
  const Tensor *c = ptr(rope, cos_d), *s = ptr(rope, sin_d);
  // The reference chain restacks into a new tensor and leaves its input alone.
  Tensor ref_in = on_dev(qkv);
  const Tensor want = ops::qk_rmsnorm_rope(plan_of({}), ref_in, H, D, g0, g1, c, s);
  EXPECT_NE(want.data(), ref_in.data()) << what;
  EXPECT_TRUE(same_bits(ref_in, qkv, "reference input")) << what;
  // The fused kernel works in place.
  ASSERT_EQ(kernels::fused::qk_unsupported(ref_in, 3 * C, H, D, c, s), "") << what;
  Tensor got_in = on_dev(qkv);
  const Tensor got =
      ops::qk_rmsnorm_rope(plan_of({Flag::qk_rmsnorm_rope_inplace}), got_in, H, D, g0, g1, c, s);
  EXPECT_EQ(got.data(), got_in.data()) << what;
  EXPECT_TRUE(same_bits(got, want, "qk_rmsnorm_rope")) << what;
  // v is the input's either way.
  auto v_of = [&](const Tensor& packed) {
    const Tensor host = packed.to(Device::CPU);
    Tensor v = Tensor::empty({T, C}, DType::BF16, Device::CPU);
    RowView dst = RowView::of(v);
    kernels::copy_rows(RowView{host, 2 * C, T, C, 3 * C}, dst);
    return v;
  };
  EXPECT_TRUE(same_bits(v_of(want), v_of(qkv), "reference v slot")) << what;
  EXPECT_TRUE(same_bits(v_of(got), v_of(qkv), "fused v slot")) << what;
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_rope_inplace"), 0u) << what;
  if (!kOnCuda) return;  // on the CPU the fused kernel is its own CPU version

  // The GPU against the fused kernel's CPU version.
  Tensor qkv_h = copy_of(qkv);
  kernels::fused::qk_rmsnorm_rope_inplace(qkv_h, H, D, ptr(norm, qg), ptr(norm, kg),
                                          ptr(rope, cos), ptr(rope, sin));
  // The norm's fp64 sum is added in another order on the CPU: its output may differ by 1 ulp
  // (as head_rmsnorm between the backends); the rotation then carries that absolute
  // difference, up to an ulp of the pair's larger value, into its output (however small the
  // output), plus the output's own rounding.
  std::vector<float> y;
  if (norm && rope) {
    Tensor norm_in = copy_of(qkv);
    y = ops::qk_rmsnorm_rope(plan_of({}), norm_in, H, D, &qg, &kg, nullptr, nullptr).to_floats();
  }
  EXPECT_TRUE(meets(got, qkv_h, norm ? Contract::Close : Contract::Bitwise,
                    what + " vs CPU version", [&](size_t i, double g, double cv) {
                      if (y.empty()) return false;
                      const size_t p = i & ~size_t{1};
                      const double pair = std::fmax(std::fabs(y[p]), std::fabs(y[p + 1]));
                      return std::fabs(g - cv) <=
                             testing::bf16_spacing(pair) +
                                 testing::bf16_spacing(std::fmax(std::fabs(g), std::fabs(cv)));
                    }));
}

TEST_F(FusedOps, QkRmsNormRopeFusedIsTheReferenceChainBitwise) {
  S3D_TEST_DEVICE();
  for (int64_t T : kSmallTokens) {
    check_qk(T, 2, 64, true, true, 10 + T);
    check_qk(T, 3, 16, true, true, 20 + T);   // odd head count, D = 16
    check_qk(T, 1, 136, true, true, 30 + T);  // D > 128: a second chunk per lane
    check_qk(T, 2, 64, true, false, 40 + T);  // ape models: norm only
    check_qk(T, 2, 64, false, true, 50 + T);  // no qk_rms_norm: RoPE only
  }
  check_qk(5, kH, kD, true, true, 60);  // the production head shape
  for (int64_t T : all_tokens()) {
    check_qk(T, kH, kD, true, true, 300 + T);
    check_qk(T, kH, kD, true, false, 303 + T);
    check_qk(T, kH, kD, false, true, 306 + T);
  }
}

TEST_F(FusedOps, QkRmsNormRopeWithNothingToDoReturnsItsInput) {
  S3D_TEST_DEVICE();
  Tensor qkv = on_dev(random_tensor({3, 3 * 16}, DType::BF16, 61));
  for (bool fused : {false, true}) {
    Tensor got = ops::qk_rmsnorm_rope(plan_if(fused, Flag::qk_rmsnorm_rope_inplace), qkv, 2, 8,
                                      nullptr, nullptr, nullptr, nullptr);
    EXPECT_EQ(got.data(), qkv.data()) << "fused " << fused;
  }
  EXPECT_TRUE(contract::fallback_counts().empty());
}

// ---- qk_rmsnorm_cross ----

TEST_F(FusedOps, CrossQRmsNormFusedIsTheReferenceBitwise) {
  S3D_TEST_DEVICE();
  auto check = [](int64_t T, int H, int D, uint64_t seed) {
    const std::string what = on_device(cat("cross_q_rmsnorm T ", T, " H ", H, " D ", D));
    Tensor q = random_tensor({T, int64_t{H} * D}, DType::BF16, seed, 2.0f, -0.2f);
    Tensor g = random_tensor({H, D}, DType::F32, 80 + D, 0.3f, 1.0f);
    const Tensor g_d = on_dev(g);
    Tensor ref_in = on_dev(q);
    const Tensor want = ops::qk_rmsnorm_cross(plan_of({}), ref_in, g_d, H, D);
    EXPECT_NE(want.data(), ref_in.data()) << what;
    EXPECT_TRUE(same_bits(ref_in, q, "reference input")) << what;
    Tensor got_in = on_dev(q);
    const Tensor got =
        ops::qk_rmsnorm_cross(plan_of({Flag::qk_rmsnorm_cross_inplace}), got_in, g_d, H, D);
    EXPECT_EQ(got.data(), got_in.data()) << what << ": the fused kernel works in place";
    EXPECT_TRUE(same_bits(got, want, "cross_q_rmsnorm")) << what;
    if (!kOnCuda) return;  // on the CPU the fused kernel is its own CPU version
    Tensor q_h = copy_of(q);
    kernels::fused::qk_rmsnorm_cross_inplace(q_h, g, H, D);
    EXPECT_TRUE(meets(got, q_h, Contract::Close, what + " vs CPU version"));
  };
  for (int64_t T : kSmallTokens) {
    for (auto [H, D] : {std::pair{2, 64}, std::pair{3, 24}, std::pair{kH, kD}})
      check(T, H, D, 70 + T + D);
  }
  for (int64_t T : kLargeTokens) check(T, kH, kD, 310 + T);
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_cross_inplace"), 0u);
}

TEST_F(FusedOps, QkKernelsRefuseUnsupportedShapesAndTheEntryPointsFallBack) {
  S3D_TEST_DEVICE();
  // head_dim 10: not a multiple of 8. The fused kernel throws ...
  Tensor qkv = on_dev(random_tensor({3, 3 * 20}, DType::BF16, 90));
  Tensor g = on_dev(random_tensor({2, 10}, DType::F32, 91));
  const std::string why = kernels::fused::qk_unsupported(qkv, 60, 2, 10, nullptr, nullptr);
  EXPECT_NE(why.find("head_dim 10"), std::string::npos) << why;
  EXPECT_TRUE(throws_error(
      [&] { kernels::fused::qk_rmsnorm_rope_inplace(qkv, 2, 10, &g, &g, nullptr, nullptr); },
      {"qk_rmsnorm_rope_inplace", "unsupported", "head_dim 10"}));
  // ... and the op runs the reference chain, counted with the reason.
  Tensor want = ops::qk_rmsnorm_rope(plan_of({}), qkv, 2, 10, &g, &g, nullptr, nullptr);
  Tensor got = ops::qk_rmsnorm_rope(plan_of({Flag::qk_rmsnorm_rope_inplace}), qkv, 2, 10, &g, &g,
                                    nullptr, nullptr);
  EXPECT_TRUE(same_bits(got, want, "qk_rmsnorm_rope fallback"));
  ASSERT_EQ(contract::fallback_counts().size(), 1u);
  EXPECT_EQ(contract::fallback_counts()[0].optimization, "qk_rmsnorm_rope_inplace");
  EXPECT_EQ(contract::fallback_counts()[0].reason, why);
  // A view starting 2 bytes into the storage: not 16-byte aligned.
  Tensor big = on_dev(random_tensor({4 * 64 + 1}, DType::BF16, 92));
  Tensor odd = big.reshape({4 * 64 + 1}).rows(1, 4 * 64 + 1).reshape({4, 64});
  EXPECT_NE(kernels::fused::qk_unsupported(odd, 64, 1, 64, nullptr, nullptr), "");
  Tensor g64 = on_dev(random_tensor({1, 64}, DType::F32, 93));
  EXPECT_TRUE(throws_error([&] { kernels::fused::qk_rmsnorm_cross_inplace(odd, g64, 1, 64); },
                           {"qk_rmsnorm_cross_inplace", "16-byte"}));
  Tensor q_want = ops::qk_rmsnorm_cross(plan_of({}), odd, g64, 1, 64);
  Tensor q_got = ops::qk_rmsnorm_cross(plan_of({Flag::qk_rmsnorm_cross_inplace}), odd, g64, 1, 64);
  EXPECT_TRUE(same_bits(q_got, q_want, "cross_q_rmsnorm fallback"));
  EXPECT_EQ(fallbacks_of("qk_rmsnorm_cross_inplace"), 1u);
}

// ---- modulated_layernorm ----

void check_modulated(int64_t T, int64_t C, int B, uint64_t seed) {
  const std::string what = on_device(cat("modulated_layernorm T ", T, " C ", C, " B ", B));
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 1, 0.5f);
  Tensor bidx = batch_runs(T, B);
  const Tensor x_d = on_dev(x), mod_d = on_dev(mod), bidx_d = on_dev(bidx);
  const RowView shift = RowView::columns(mod_d, 3 * C, C);
  const RowView scale = RowView::columns(mod_d, 4 * C, C);
  Tensor want = poisoned_dev({T, C});
  ops::modulated_layernorm(plan_of({}), x_d, shift, scale, bidx_d, 1e-6f, want);
  Tensor got = poisoned_dev({T, C});
  ASSERT_EQ(kernels::fused::modulated_layernorm_unsupported(x_d, shift, scale, got), "") << what;
  ops::modulated_layernorm(plan_of({Flag::modulated_layernorm}), x_d, shift, scale, bidx_d, 1e-6f,
                           got);
  EXPECT_EQ(count_poisoned(want), 0) << what;
  EXPECT_EQ(count_poisoned(got), 0) << what;
  EXPECT_TRUE(same_bits(got, want, "modulated_layernorm")) << what;
  if (!kOnCuda) return;  // on the CPU the fused kernel is its own CPU version

  // The GPU against the fused kernel's CPU version.
  Tensor got_h = test::poisoned({T, C}, DType::BF16, Device::CPU);
  const RowView sh = RowView::columns(mod, 3 * C, C), sc = RowView::columns(mod, 4 * C, C);
  kernels::fused::modulated_layernorm(x, sh, sc, bidx, 1e-6f, got_h);
  EXPECT_EQ(count_poisoned(got_h), 0) << what;
  // layer_norm is a 1-ulp op between the backends: h may differ by 1 ulp, m = bf16(h s) then
  // by up to 2 ulps of m, and out = m + shift carries that absolute difference (however small
  // out is), plus out's own rounding.
  Tensor hn = Tensor::empty({T, C}, DType::BF16, Device::CPU);
  kernels::layer_norm(x, nullptr, nullptr, 1e-6f, hn);
  const std::vector<float> hv = hn.to_floats(), mv = mod.to_floats(), bv = bidx.to_floats();
  EXPECT_TRUE(meets(got, got_h, Contract::Close, what + " vs CPU version",
                    [&](size_t i, double g, double c) {
                      const size_t w = size_t(C), t = i / w, col = i % w;
                      const double s = round_bf16(mv[size_t(bv[t]) * 6 * w + 4 * w + col] + 1.0f);
                      const double m = std::fabs(hv[i] * s);
                      return std::fabs(g - c) <=
                             2 * testing::bf16_spacing(m) +
                                 testing::bf16_spacing(std::fmax(std::fabs(g), std::fabs(c)));
                    }));
}

TEST_F(FusedOps, ModulatedLayerNormFusedIsTheReferenceChainBitwise) {
  S3D_TEST_DEVICE();
  for (int64_t T : kSmallTokens) {
    check_modulated(T, 8, 1, 100 + T);
    check_modulated(T, 136, 3, 110 + T);  // C not a multiple of 16 or of the block width
    check_modulated(T, kC, 2, 120 + T);
  }
  for (int64_t T : all_tokens()) {
    for (int B : {1, 3}) check_modulated(T, kC, B, 320 + T + B);
  }
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 0u);
}

TEST_F(FusedOps, ModulatedLayerNormRefusesOddWidthsAndFallsBack) {
  S3D_TEST_DEVICE();
  for (int64_t C : {7, 30}) {
    const Tensor x = on_dev(random_tensor({3, C}, DType::BF16, 130));
    const Tensor mod = on_dev(random_tensor({1, 6 * C}, DType::BF16, 131));
    const Tensor bidx = on_dev(batch_runs(3, 1));
    Tensor out = poisoned_dev({3, C});
    const RowView shift = RowView::columns(mod, 0, C), scale = RowView::columns(mod, C, C);
    EXPECT_NE(kernels::fused::modulated_layernorm_unsupported(x, shift, scale, out), "") << C;
    EXPECT_TRUE(throws_error(
        [&] { kernels::fused::modulated_layernorm(x, shift, scale, bidx, 1e-6f, out); },
        {"modulated_layernorm", "unsupported", "multiple of 8"}));
    EXPECT_EQ(count_poisoned(out), 3 * C) << "a refused call writes nothing";
    Tensor want = poisoned_dev({3, C});
    ops::modulated_layernorm(plan_of({}), x, shift, scale, bidx, 1e-6f, want);
    ops::modulated_layernorm(plan_of({Flag::modulated_layernorm}), x, shift, scale, bidx, 1e-6f,
                             out);
    EXPECT_EQ(count_poisoned(out), 0);
    EXPECT_TRUE(same_bits(out, want, "modulated_layernorm fallback")) << C;
  }
  EXPECT_EQ(fallbacks_of("modulated_layernorm"), 2u);
}

TEST_F(FusedOps, ModulatedLayerNormRejectsABadBatchIndexOnEveryRung) {
  S3D_TEST_DEVICE();
  // The GPU kernels trap on a batch index outside [0, B) (reading the indices on the host
  // would need a synchronisation), which ends the CUDA context: only the CPU throws. Each rung
  // of the op's ladder (the tolerance kernel, the bitwise one, the reference chain's gather)
  // names the bad index itself.
  if (kOnCuda) GTEST_SKIP() << "a bad batch index traps on the GPU; the CPU build checks it";
  Tensor x = random_tensor({3, 16}, DType::BF16, 140);
  Tensor mod = random_tensor({2, 96}, DType::BF16, 141);
  Tensor out = Tensor::empty({3, 16}, DType::BF16, Device::CPU);
  Tensor bidx = Tensor::from_ints({0, 1, 2}, {3});
  const RowView shift = RowView::columns(mod, 0, 16), scale = RowView::columns(mod, 16, 16);
  const struct {
    sparse3d::FlagSet flags;
    const char* message;
  } rungs[] = {
      {{Flag::fast_modulated_layernorm, Flag::modulated_layernorm},
       "fast modulated_layernorm: batch_index[2] = 2"},
      {{Flag::modulated_layernorm}, "modulated_layernorm: batch_index[2] = 2"},
      {{}, "gather_rows: index[2] = 2"},
  };
  for (const auto& rung : rungs) {
    const ops::OpPlan plan = ops::OpPlan::resolve(rung.flags);
    EXPECT_TRUE(throws_error(
        [&] { ops::modulated_layernorm(plan, x, shift, scale, bidx, 1e-6f, out); },
        {rung.message, "outside [0, 2)"}));
  }
}

// ---- gated_residual_add ----

void check_gated(int64_t T, int64_t C, int B, uint64_t seed) {
  const std::string what = on_device(cat("gated_residual_add T ", T, " C ", C, " B ", B));
  Tensor x = random_tensor({T, C}, DType::BF16, seed, 3.0f);
  Tensor h = random_tensor({T, C}, DType::BF16, seed + 1, 1.0f, 0.3f);
  Tensor mod = random_tensor({B, 6 * C}, DType::BF16, seed + 2, 0.7f);
  Tensor bidx = batch_runs(T, B);
  const Tensor x_d = on_dev(x), h_d = on_dev(h), mod_d = on_dev(mod), bidx_d = on_dev(bidx);
  const RowView gate = RowView::columns(mod_d, 5 * C, C);
  Tensor want = poisoned_dev({T, C});
  ops::gated_residual_add(plan_of({}), x_d, h_d, gate, bidx_d, want);
  Tensor got = poisoned_dev({T, C});
  ops::gated_residual_add(plan_of({Flag::gated_residual_add}), x_d, h_d, gate, bidx_d, got);
  EXPECT_EQ(count_poisoned(want), 0) << what;
  EXPECT_EQ(count_poisoned(got), 0) << what;
  EXPECT_TRUE(same_bits(got, want, "gated_residual_add")) << what;
  // The fused kernel in place into x gives the same bits.
  Tensor xi = on_dev(x);
  ops::gated_residual_add(plan_of({Flag::gated_residual_add}), xi, h_d, gate, bidx_d, xi);
  EXPECT_TRUE(same_bits(xi, want, "gated_residual_add in place")) << what;
  if (!kOnCuda) return;  // on the CPU the fused kernel is its own CPU version
  Tensor got_h = test::poisoned({T, C}, DType::BF16, Device::CPU);
  kernels::fused::gated_residual_add(x, h, RowView::columns(mod, 5 * C, C), bidx, got_h);
  EXPECT_TRUE(meets(got, got_h, Contract::Bitwise, what + " vs CPU version"));
}

TEST_F(FusedOps, GatedResidualAddFusedIsTheReferenceChainBitwise) {
  S3D_TEST_DEVICE();
  for (int64_t T : kSmallTokens) {
    for (int64_t C : {int64_t{8}, int64_t{136}, kC}) {
      for (int B : {1, 3}) check_gated(T, C, B, 150 + T + C + 10 * B);
    }
  }
  for (int64_t T : kLargeTokens) {
    for (int B : {1, 3}) check_gated(T, kC, B, 330 + T + B);
  }
  EXPECT_EQ(fallbacks_of("gated_residual_add"), 0u);
}

TEST_F(FusedOps, GatedResidualAddRefusesOddWidthsAndFallsBack) {
  S3D_TEST_DEVICE();
  const Tensor x = on_dev(random_tensor({3, 12}, DType::BF16, 180));
  const Tensor mod = on_dev(random_tensor({1, 72}, DType::BF16, 181));
  const Tensor bidx = on_dev(batch_runs(3, 1));
  Tensor out = poisoned_dev({3, 12});
  const RowView gate = RowView::columns(mod, 60, 12);
  EXPECT_NE(kernels::fused::gated_residual_add_unsupported(x, x, gate, out), "");
  EXPECT_TRUE(throws_error([&] { kernels::fused::gated_residual_add(x, x, gate, bidx, out); },
                           {"gated_residual_add", "unsupported"}));
  EXPECT_EQ(count_poisoned(out), 3 * 12) << "a refused call writes nothing";
  Tensor want = poisoned_dev({3, 12});
  ops::gated_residual_add(plan_of({}), x, x, gate, bidx, want);
  ops::gated_residual_add(plan_of({Flag::gated_residual_add}), x, x, gate, bidx, out);
  EXPECT_EQ(count_poisoned(out), 0);
  EXPECT_TRUE(same_bits(out, want, "gated_residual_add fallback"));
  EXPECT_EQ(fallbacks_of("gated_residual_add"), 1u);
}

// ---- mlp_gelu (the wide kernel; on the CPU the reference loop) ----

TEST_F(FusedOps, MlpGeluWideIsTheReferenceBitwise) {
  S3D_TEST_DEVICE();
  auto check = [](const Shape& shape, uint64_t seed) {
    const std::string what = on_device(cat("mlp_gelu ", shape_str(shape)));
    const Tensor x = on_dev(random_tensor(shape, DType::BF16, seed, 3.0f));
    Tensor want = poisoned_dev(shape);
    kernels::gelu_tanh(x, want);
    Tensor got = poisoned_dev(shape);
    kernels::fused::gelu_tanh(x, got);
    EXPECT_EQ(count_poisoned(want), 0) << what;
    EXPECT_EQ(count_poisoned(got), 0) << what;
    EXPECT_TRUE(same_bits(got, want, "mlp_gelu")) << what;
  };
  // Element counts that leave a tail past the last 16-element thread share.
  for (int64_t n : {1, 7, 7 * 33 + 5, 33 * 17 + 3}) check({n}, 190 + n);
  // The MLP's hidden width.
  for (int64_t T : all_tokens()) check({T, 8192}, 340 + T);
}

// ---- linear_gelu with gemm_gelu_epilogue: bounded error, not bitwise ----

// fc1 = [T, K] x [N, K]^T + b: a small one (w's scale 0.4: |z| up to ~10) on both backends,
// and the MLP's fc1 (K 1536, N 8192; w's scale 0.05: |z| up to ~8 for unit x) at 1 and 7
// tokens, and on the GPU also at the model's token counts.
void check_epilogue(int64_t T, int64_t K, int64_t N, float w_scale, uint64_t seed) {
  const std::string what = on_device(cat("linear_gelu T ", T, " K ", K, " N ", N));
  const Tensor x = random_tensor({T, K}, DType::BF16, seed, 1.0f);
  const Tensor w = random_tensor({N, K}, DType::BF16, seed + 1, w_scale);
  const Tensor b = random_tensor({N}, DType::BF16, seed + 2, 0.5f);
  const Tensor x_d = on_dev(x), w_d = on_dev(w), b_d = on_dev(b);
  Tensor u = Tensor::empty({T, N}, DType::BF16, kTestDevice);
  gemm::linear(x_d, w_d, &b_d, u);
  Tensor ref = poisoned_dev({T, N});
  ops::linear_gelu(plan_of({}), x_d, w_d, &b_d, ref);
  Tensor ref_wide = poisoned_dev({T, N});
  ops::linear_gelu(plan_of({Flag::gelu_tanh}), x_d, w_d, &b_d, ref_wide);
  EXPECT_TRUE(same_bits(ref_wide, ref, "linear_gelu with the wide GELU")) << what;
  Tensor fused = poisoned_dev({T, N});
  ops::linear_gelu(plan_of({Flag::gemm_gelu_epilogue}), x_d, w_d, &b_d, fused);
  EXPECT_EQ(count_poisoned(ref), 0) << what;
  EXPECT_EQ(count_poisoned(fused), 0) << what;
  EXPECT_TRUE(testing::meets_gelu_epilogue_contract(u, ref, fused, what));
  // The GPU version of the check (tests/gpu/epilogue_error.cu, used on the full model) agrees
  // with the host's; it is built into the GPU suite only.
  if constexpr (kOnCuda) {
    const testing::EpilogueError host = testing::gelu_epilogue_error(u, ref, fused),
                                 dev = testing::gelu_epilogue_error_gpu(u, ref, fused);
    EXPECT_EQ(dev.max_abs, host.max_abs) << what;
    EXPECT_EQ(dev.worst_excess, host.worst_excess) << what;
    EXPECT_EQ(dev.outside, host.outside) << what;
    EXPECT_EQ(dev.non_finite, host.non_finite) << what;
    EXPECT_NEAR(dev.rel_l2, host.rel_l2, 1e-9 + 1e-6 * host.rel_l2) << what;
  }
  // fp64 golden: the fused path may not be noticeably less accurate than the reference. Every
  // row up to 64 tokens; beyond, the first 8 and the last.
  const auto xv = x.to_floats(), wv = w.to_floats(), bv = b.to_floats();
  const auto rv = ref.to(Device::CPU).to_floats(), fv = fused.to(Device::CPU).to_floats();
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < (T <= 64 ? T : 8); ++r) rows.push_back(r);
  if (T > 64) rows.push_back(T - 1);
  double err_ref = 0, err_fused = 0;
  int64_t n_el = 0;
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

TEST_F(FusedOps, GemmGeluEpilogueMeetsItsTolerance) {
  S3D_TEST_DEVICE();
  for (int64_t T : kSmallTokens) check_epilogue(T, 64, 256, 0.4f, 200 + T);
  for (int64_t T : {int64_t{1}, int64_t{7}}) check_epilogue(T, kC, 8192, 0.05f, 350 + T);
  for (int64_t T : kLargeTokens) check_epilogue(T, kC, 8192, 0.05f, 350 + T);
}

}  // namespace
}  // namespace s3d
