// gemm::linear on the CPU against an independent fp64 loop, and its boundary checks. The empty
// batch runs on both backends in tests/device/test_linear.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../test_numerics.h"
#include "core/bf16.h"
#include "core/cuda_util.h"
#include "gemm/linear.h"

namespace s3d {
namespace {

using gemm::Epilogue;
using testing::error_of;
using testing::random_tensor;

struct Expected {
  std::vector<double> value;  // fp64 result
  std::vector<double> scale;  // sum |x_k w_k| + |b| + |value|: the size of the rounding error
};

// Independent fp64 reference: y = x W^T + b, then gelu(tanh) in fp64.
Expected reference(const Tensor& x, const Tensor& w, const Tensor* b, Epilogue e) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const std::vector<float> xf = x.to_floats(), wf = w.to_floats();
  const std::vector<float> bf = b ? b->to_floats() : std::vector<float>(N, 0.0f);
  Expected r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = bf[n], mag = std::fabs(bf[n]);
      for (int64_t k = 0; k < K; ++k) {
        s += static_cast<double>(xf[m * K + k]) * wf[n * K + k];
        mag += std::fabs(static_cast<double>(xf[m * K + k]) * wf[n * K + k]);
      }
      if (e == Epilogue::BiasGelu)
        s = 0.5 * s * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
      r.value[m * N + n] = s;
      r.scale[m * N + n] = mag + std::fabs(s);
    }
  }
  return r;
}

void check_case(int64_t M, int64_t K, int64_t N, DType dt, Epilogue e, uint64_t seed) {
  SCOPED_TRACE(
      cat("M=", M, " K=", K, " N=", N, " ", dtype_name(dt), " epilogue ", static_cast<int>(e)));
  Tensor x = random_tensor({M, K}, dt, seed);
  Tensor w = random_tensor({N, K}, dt, seed + 1, 0.3f);
  Tensor b = random_tensor({N}, dt, seed + 2, 0.5f);
  Tensor y = Tensor::empty({M, N}, dt, Device::CPU);
  y.poison();
  const Tensor* bias = e == Epilogue::None ? nullptr : &b;
  gemm::linear(x, w, bias, y, e);
  EXPECT_EQ(testing::count_poisoned(y), 0);

  Expected want = reference(x, w, bias, e);
  std::vector<float> got = y.to_floats();
  // bf16: one rounding (half an ulp, 2^-9 relative) plus fp32 accumulation error. f32: only the
  // accumulation error, a few ulps of the magnitude of the summed terms.
  const double rel = dt == DType::BF16 ? 0x1p-8 : 0.0;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = rel * std::fabs(want.value[i]) + 1e-6 * want.scale[i] + 1e-30;
    if (!(std::fabs(got[i] - want.value[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want.value[i]
                    << " (tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0);
}

TEST(LinearCpu, MatchesFp64AcrossShapesDtypesAndEpilogues) {
  uint64_t seed = 100;
  for (DType dt : {DType::BF16, DType::F32})
    for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::BiasGelu})
      for (int64_t M : {1, 7, 33})
        for (auto [K, N] : {std::pair<int64_t, int64_t>{13, 37}, {37, 13}, {64, 5}, {1, 1}})
          check_case(M, K, N, dt, e, seed += 10);
}

TEST(LinearCpu, LargerThanOneBlockOfRowsAndColumns) {
  check_case(130, 96, 200, DType::BF16, Epilogue::Bias, 7);
  check_case(9, 300, 129, DType::F32, Epilogue::BiasGelu, 8);
}

TEST(LinearCpu, BiasIsAddedBeforeTheSingleRounding) {
  // Near 1 bf16 steps by 2^-7. x W^T = 1 + 3 * 2^-9 (exact in fp32) and b = -1.5 * 2^-9:
  // one rounding of 1 + 1.5 * 2^-9 gives 1; rounding the product first (to 1 + 2^-7) and then
  // the sum 1 + 2.5 * 2^-9 gives 1 + 2^-7.
  const float c = 3.0f * 0x1p-9f, bias_v = -1.5f * 0x1p-9f;
  Tensor x = Tensor::from_floats({1.0f, c}, {1, 2}, DType::BF16);
  Tensor w = Tensor::from_floats({1.0f, 1.0f}, {1, 2}, DType::BF16);
  Tensor b = Tensor::from_floats({bias_v}, {1}, DType::BF16);
  Tensor y = Tensor::empty({1, 1}, DType::BF16, Device::CPU);
  gemm::linear(x, w, &b, y, Epilogue::Bias);
  const float once = round_bf16(1.0f + c + bias_v);
  const float twice = round_bf16(round_bf16(1.0f + c) + bias_v);
  ASSERT_NE(once, twice) << "the test values no longer tell one rounding from two";
  EXPECT_EQ(y.to_floats()[0], once);
}

TEST(LinearCpu, RejectsBadArguments) {
  Tensor x = random_tensor({3, 8}, DType::BF16, 1);
  Tensor w = random_tensor({4, 8}, DType::BF16, 2);
  Tensor b = random_tensor({4}, DType::BF16, 3);
  Tensor y = Tensor::empty({3, 4}, DType::BF16, Device::CPU);

  Tensor w_bad_k = random_tensor({4, 7}, DType::BF16, 4);
  EXPECT_NE(error_of([&] { gemm::linear(x, w_bad_k, &b, y); }).find("has 8 columns"),
            std::string::npos);
  Tensor y_bad = Tensor::empty({3, 5}, DType::BF16, Device::CPU);
  EXPECT_NE(error_of([&] { gemm::linear(x, w, &b, y_bad); }).find("linear: y must be"),
            std::string::npos);
  Tensor b_bad = random_tensor({5}, DType::BF16, 5);
  EXPECT_NE(error_of([&] { gemm::linear(x, w, &b_bad, y); }).find("linear: bias"),
            std::string::npos);
  Tensor w_f32 = random_tensor({4, 8}, DType::F32, 6);
  EXPECT_NE(error_of([&] { gemm::linear(x, w_f32, &b, y); }).find("dtypes differ"),
            std::string::npos);
  Tensor b_f32 = random_tensor({4}, DType::F32, 7);
  EXPECT_NE(error_of([&] { gemm::linear(x, w, &b_f32, y); }).find("linear: bias"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              gemm::linear(x, w, &b, y, Epilogue::None);
            }).find("was given with Epilogue::None"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gemm::linear(x, w, nullptr, y, Epilogue::Bias); }).find("needs a bias"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { gemm::linear(x, w, nullptr, y, Epilogue::BiasGelu); }).find("needs a bias"),
      std::string::npos);
  Tensor x3 = random_tensor({3, 2, 4}, DType::BF16, 8);
  EXPECT_NE(error_of([&] { gemm::linear(x3, w, &b, y); }).find("must be 2-D"), std::string::npos);
  Tensor xi = Tensor::from_ints({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  EXPECT_NE(error_of([&] { gemm::linear(xi, w, &b, y); }).find("bf16 or f32"), std::string::npos);
}

TEST(LinearCpu, VersionWithoutGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; the version is checked by GPU tests";
  EXPECT_EQ(gemm::cublaslt_version(), "none");
}

}  // namespace
}  // namespace s3d
