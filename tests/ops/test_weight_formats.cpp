// The weight formats of linear layers (ops/weight_format.h), on the test device
// (tests/device_under_test.h): the table's rows; the epilogue kernel of row_scaled
// (kernels::scale_columns_add_bias) against the fp32 fma it promises, element by element, on
// odd shapes, with every bias dtype and none; row_scaled's create (what it stores) and its
// apply through ops::linear against the plain layer, within the format's tolerance; and the
// MLP's linear_gelu over a row_scaled layer, whose epilogue candidate refuses (counted) while
// the bitwise wide GELU still runs when its flag is on.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "contract/fallback.h"
#include "core/bf16.h"
#include "cpu/kernel_test_util.h"
#include "device_contract.h"
#include "kernels/column_scale.h"
#include "device_under_test.h"
#include "ops/linear.h"
#include "ops/linear_gelu.h"
#include "ops/weight_format.h"
#include "ops_plan.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using sparse3d::Flag;
using test::fallbacks_of;
using test::kTestDevice;
using test::plan_of;
using testing::random_tensor;

const ops::WeightFormat& row_scaled() { return ops::find_weight_format("row_scaled"); }

struct WeightFormats : ::testing::Test {
  void SetUp() override { contract::reset_fallbacks(); }
};

TEST_F(WeightFormats, TheTableNamesEachFormatOnceWithPlainFirst) {
  S3D_TEST_DEVICE();
  const auto& formats = ops::weight_formats();
  ASSERT_GE(formats.size(), 2u);
  EXPECT_EQ(formats.front().name, "plain");
  EXPECT_EQ(&ops::find_weight_format(""), &ops::plain_format());
  EXPECT_EQ(&ops::find_weight_format("plain"), &ops::plain_format());
  for (size_t i = 0; i < formats.size(); ++i)
    for (size_t j = i + 1; j < formats.size(); ++j) EXPECT_NE(formats[i].name, formats[j].name);
  EXPECT_EQ(ops::plain_format().contract, ops::Contract::Bitwise);
  EXPECT_EQ(row_scaled().contract, ops::Contract::Tolerance);
  // row_scaled takes the bf16 layers (the blocks') and leaves the f32 ones plain.
  EXPECT_EQ(&ops::format_for(row_scaled(), DType::BF16), &row_scaled());
  EXPECT_EQ(&ops::format_for(row_scaled(), DType::F32), &ops::plain_format());
  const std::string e = testing::error_of([] { ops::find_weight_format("fp8"); });
  EXPECT_NE(e.find("unknown weight format 'fp8' (known: plain, row_scaled"), std::string::npos)
      << e;
}

// y = bf16(fma(y, s, b)) per element, computed here from the host values.
std::vector<float> expected_scaled(const Tensor& y, const Tensor& s, const Tensor* b) {
  const std::vector<float> yv = y.to_floats(), sv = s.to_floats();
  const std::vector<float> bv = b ? b->to_floats() : std::vector<float>(sv.size(), 0.0f);
  const int64_t N = y.size(1);
  std::vector<float> out(yv.size());
  for (size_t i = 0; i < yv.size(); ++i) {
    const size_t n = i % static_cast<size_t>(N);
    out[i] = bf16_to_float(float_to_bf16(std::fma(yv[i], sv[n], bv[n])));
  }
  return out;
}

TEST_F(WeightFormats, ScaleColumnsAddBiasIsOneFmaPerElement) {
  S3D_TEST_DEVICE();
  for (const auto& [M, N] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {37, 71}, {129, 200}}) {
    for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {  // none, bf16, f32
      const uint64_t seed = 900 + uint64_t(M) * 7 + uint64_t(N) + uint64_t(bias_kind);
      const Tensor y0 = random_tensor({M, N}, DType::BF16, seed, 2.0f);
      // Scales away from 1 and biases away from 0: an element left unwritten fails.
      const Tensor s = random_tensor({N}, DType::F32, seed + 1, 0.5f, 3.0f);
      const Tensor b = random_tensor({N}, bias_kind == 2 ? DType::F32 : DType::BF16, seed + 2,
                                     0.5f, 1.0f);
      const Tensor* bias = bias_kind == 0 ? nullptr : &b;
      Tensor y = y0.to(kTestDevice);
      const Tensor s_d = s.to(kTestDevice), b_d = b.to(kTestDevice);
      kernels::scale_columns_add_bias(y, s_d, bias ? &b_d : nullptr);
      const std::vector<float> got = y.to_floats(), want = expected_scaled(y0, s, bias);
      int64_t wrong = 0;
      for (size_t i = 0; i < got.size(); ++i) wrong += std::memcmp(&got[i], &want[i], 4) != 0;
      EXPECT_EQ(wrong, 0) << "M " << M << " N " << N << " bias kind " << bias_kind << " on "
                          << device_name(kTestDevice);
    }
  }
  Tensor y = Tensor::empty({3, 5}, DType::BF16, kTestDevice);
  const Tensor s = Tensor::empty({4}, DType::F32, kTestDevice);
  const std::string e = testing::error_of([&] { kernels::scale_columns_add_bias(y, s, nullptr); });
  EXPECT_NE(e.find("scale_columns_add_bias: scale must have shape [5]"), std::string::npos) << e;
}

// A bf16 layer [N, K] as the checkpoint holds it, and its two formats on the test device.
struct Layer {
  Tensor weight, bias;
  ops::LinearWeights plain, scaled;
  Layer(int64_t N, int64_t K, uint64_t seed)
      : weight(random_tensor({N, K}, DType::BF16, seed, 1.0f / std::sqrt(float(K)))),
        bias(random_tensor({N}, DType::BF16, seed + 1, 0.5f)) {
    plain = {&ops::plain_format(), weight.to(kTestDevice), bias.to(kTestDevice), Tensor()};
    const std::vector<Tensor> made = row_scaled().create(weight, bias);
    const auto layout = row_scaled().layout(N, K, DType::BF16);
    EXPECT_EQ(made.size(), layout.size());
    scaled.format = &row_scaled();
    for (size_t i = 0; i < layout.size(); ++i) {
      EXPECT_EQ(made[i].shape(), layout[i].shape) << layout[i].suffix;
      EXPECT_EQ(made[i].dtype(), layout[i].dtype) << layout[i].suffix;
      scaled.*layout[i].field = made[i].to(kTestDevice);
    }
  }
};

TEST_F(WeightFormats, RowScaledStoresEachRowOverItsLargestMagnitude) {
  S3D_TEST_DEVICE();
  const int64_t N = 67, K = 45;
  Layer l(N, K, 31);
  const std::vector<float> w = l.weight.to_floats(), q = l.scaled.weight.to_floats(),
                           s = l.scaled.scale.to_floats();
  for (int64_t n = 0; n < N; ++n) {
    float largest = 0, stored = 0;
    for (int64_t k = 0; k < K; ++k) {
      largest = std::max(largest, std::fabs(w[size_t(n * K + k)]));
      stored = std::max(stored, std::fabs(q[size_t(n * K + k)]));
      // Each stored value is the weight over the scale, rounded once to bf16.
      EXPECT_EQ(q[size_t(n * K + k)],
                bf16_to_float(float_to_bf16(w[size_t(n * K + k)] / s[size_t(n)])));
    }
    EXPECT_EQ(s[size_t(n)], largest) << "row " << n;
    EXPECT_EQ(stored, 1.0f) << "row " << n;
  }
  EXPECT_TRUE(testing::bitwise_equal(l.scaled.bias, l.plain.bias));
}

TEST_F(WeightFormats, RowScaledLinearIsThePlainLayerWithinItsTolerance) {
  S3D_TEST_DEVICE();
  for (const auto& [T, N, K] : std::vector<std::array<int64_t, 3>>{{1, 67, 45}, {37, 129, 96},
                                                                   {301, 200, 72}}) {
    Layer l(N, K, 40 + uint64_t(T));
    const Tensor x = random_tensor({T, K}, DType::BF16, 50 + uint64_t(T)).to(kTestDevice);
    Tensor want = test::poisoned({T, N}, DType::BF16, kTestDevice);
    Tensor got = test::poisoned({T, N}, DType::BF16, kTestDevice);
    for (const ops::OpPlan& plan : {plan_of({}), plan_of({Flag::tuned_gemm})}) {
      ops::linear(plan, x, l.plain, want);
      ops::linear(plan, x, l.scaled, got);
      EXPECT_EQ(testing::count_poisoned(got), 0);
      const double err = testing::rel_l2(got.to_floats(), want.to_floats());
      EXPECT_LT(err, row_scaled().tolerance) << "T " << T << " N " << N << " K " << K;
      EXPECT_GT(err, 0.0) << "the format's roundings left no trace: did it run?";
    }
  }
}

TEST_F(WeightFormats, LinearGeluOverARowScaledLayerRefusesTheEpilogueAndKeepsTheWideGelu) {
  S3D_TEST_DEVICE();
  const int64_t T = 33, N = 72, K = 48;
  Layer l(N, K, 70);
  const Tensor x = random_tensor({T, K}, DType::BF16, 71).to(kTestDevice);
  Tensor ref = test::poisoned({T, N}, DType::BF16, kTestDevice);
  Tensor fast = test::poisoned({T, N}, DType::BF16, kTestDevice);
  ops::linear_gelu(plan_of({}), x, l.scaled, ref);
  ops::linear_gelu(plan_of({Flag::gemm_gelu_epilogue, Flag::gelu_tanh}), x, l.scaled, fast);
  EXPECT_EQ(testing::count_poisoned(ref), 0);
  EXPECT_TRUE(testing::bitwise_equal(fast, ref));
  EXPECT_EQ(fallbacks_of("gemm_gelu_epilogue"), 1u);
  bool named = false;
  for (const auto& c : contract::fallback_counts())
    named = named || c.reason.find("format row_scaled") != std::string::npos;
  EXPECT_TRUE(named);
  // Over the plain layer the epilogue runs: no fallback.
  contract::reset_fallbacks();
  ops::linear_gelu(plan_of({Flag::gemm_gelu_epilogue}), x, l.plain, fast);
  EXPECT_EQ(fallbacks_of("gemm_gelu_epilogue"), 0u);
}

}  // namespace
}  // namespace s3d
