// CPU oracle of layer_norm against an fp64 LayerNorm written here.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/layernorm.h"

namespace s3d {
namespace {

using test::matches_exact;
using test::random_tensor;
using test::throws_error;

enum class Affine { None, WeightAndBias, WeightOnly, BiasOnly };

// fp64 LayerNorm of each row, and the error budget of the fp32 evaluation: the fp32 mean
// (one rounding of |mean|) and x - mean (|x - mean|) scale with rstd; rstd itself (a few
// ulps) scales with |y|; the affine products and sum add a rounding each.
void layer_norm_fp64(const std::vector<float>& x, int64_t C, double eps, const float* w,
                     const float* b, std::vector<double>& exact, std::vector<double>& mag) {
  const int64_t rows = static_cast<int64_t>(x.size()) / C;
  exact.assign(x.size(), 0.0);
  mag.assign(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const double yn = (x[i] - mean) * rstd;
      const double wc = w ? w[c] : 1.0, bc = b ? b[c] : 0.0;
      exact[i] = yn * wc + bc;
      mag[i] = (2.0 * std::fabs(mean) + 2.0 * std::fabs(x[i] - mean)) * rstd * std::fabs(wc) +
               6.0 * std::fabs(yn * wc) + 2.0 * std::fabs(bc);
    }
  }
}

void check_layer_norm(int64_t T, int64_t C, DType in, DType out_t, Affine affine, float eps,
                      float offset) {
  Tensor x = random_tensor({T, C}, in, 100 + C, 2.0f, offset);
  Tensor w = random_tensor({C}, DType::F32, 200 + C, 0.5f, 1.0f);
  Tensor b = random_tensor({C}, DType::F32, 300 + C, 0.5f);
  const bool has_w = affine == Affine::WeightAndBias || affine == Affine::WeightOnly;
  const bool has_b = affine == Affine::WeightAndBias || affine == Affine::BiasOnly;
  Tensor out = Tensor::empty({T, C}, out_t, Device::CPU);
  out.poison();
  kernels::layer_norm(x, has_w ? &w : nullptr, has_b ? &b : nullptr, eps, out);
  std::vector<double> exact, mag;
  layer_norm_fp64(x.to_floats(), C, eps, has_w ? w.data_as<float>() : nullptr,
                  has_b ? b.data_as<float>() : nullptr, exact, mag);
  EXPECT_TRUE(matches_exact(out, exact, mag))
      << "T " << T << " C " << C << " " << dtype_name(in) << " -> " << dtype_name(out_t)
      << " affine " << static_cast<int>(affine) << " offset " << offset;
}

TEST(LayerNormCpu, MatchesFp64AcrossDtypesAndWidths) {
  for (int64_t T : {1, 7, 33}) {
    for (int64_t C : {13, 200, 1536}) {
      for (DType in : {DType::BF16, DType::F32}) {
        for (DType out_t : {DType::BF16, DType::F32}) {
          check_layer_norm(T, C, in, out_t, Affine::None, 1e-6f, 0.0f);
        }
      }
    }
  }
}

TEST(LayerNormCpu, AffineVariantsAndShiftedMean) {
  for (Affine a : {Affine::WeightAndBias, Affine::WeightOnly, Affine::BiasOnly}) {
    check_layer_norm(7, 200, DType::BF16, DType::BF16, a, 1e-6f, 3.0f);
    check_layer_norm(7, 13, DType::F32, DType::F32, a, 1e-5f, -5.0f);
  }
}

TEST(LayerNormCpu, WideRows) {
  check_layer_norm(2, 8200, DType::BF16, DType::BF16, Affine::None, 1e-6f, 0.5f);
  check_layer_norm(2, 8192, DType::F32, DType::F32, Affine::WeightAndBias, 1e-5f, 0.0f);
}

// A constant row has zero variance: y = 0 * (1 / sqrt(eps)) = 0, not NaN.
TEST(LayerNormCpu, ConstantRowGivesZeros) {
  Tensor x = Tensor::from_floats(std::vector<float>(13, 2.5f), {1, 13}, DType::BF16);
  Tensor out = Tensor::empty({1, 13}, DType::F32, Device::CPU);
  out.poison();
  kernels::layer_norm(x, nullptr, nullptr, 1e-6f, out);
  for (float v : out.to_floats()) EXPECT_EQ(v, 0.0f);
}

// Any leading shape: the last dimension is normalised.
TEST(LayerNormCpu, ThreeDimensionalInput) {
  Tensor x = random_tensor({2, 3, 13}, DType::BF16, 5);
  Tensor out = Tensor::empty({2, 3, 13}, DType::BF16, Device::CPU);
  out.poison();
  kernels::layer_norm(x, nullptr, nullptr, 1e-6f, out);
  std::vector<double> exact, mag;
  layer_norm_fp64(x.to_floats(), 13, 1e-6, nullptr, nullptr, exact, mag);
  EXPECT_TRUE(matches_exact(out, exact, mag));
}

TEST(LayerNormCpu, RejectsBadArguments) {
  Tensor x = random_tensor({3, 8}, DType::BF16, 1);
  Tensor out = Tensor::empty({3, 8}, DType::BF16, Device::CPU);
  Tensor w7 = random_tensor({7}, DType::F32, 2);
  Tensor w_bf16 = random_tensor({8}, DType::BF16, 3);
  Tensor out_wrong = Tensor::empty({3, 7}, DType::BF16, Device::CPU);
  Tensor ints = Tensor::from_ints(std::vector<int32_t>(24, 0), {3, 8});
  EXPECT_TRUE(throws_error([&] { kernels::layer_norm(x, &w7, nullptr, 1e-6f, out); },
                           {"layer_norm", "weight", "[8]", "[7]"}));
  EXPECT_TRUE(throws_error([&] { kernels::layer_norm(x, nullptr, &w_bf16, 1e-6f, out); },
                           {"layer_norm", "bias", "f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { kernels::layer_norm(x, nullptr, nullptr, 1e-6f, out_wrong); },
                           {"layer_norm", "out", "[3, 8]"}));
  EXPECT_TRUE(throws_error([&] { kernels::layer_norm(ints, nullptr, nullptr, 1e-6f, out); },
                           {"layer_norm", "x", "i32"}));
}

}  // namespace
}  // namespace s3d
