// gemm::linear on the GPU (cuBLASLt) against the CPU reference at the model's shapes (the
// empty batch runs on both backends in tests/device/test_linear.cpp).
// Tolerances (relative L2 vs CPU): bf16 <= 1e-2 (two independent roundings of fp32 sums),
// f32 <= 1e-5 (fp32 sums in a different order, no TF32). The measured worst case is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../test_numerics.h"
#include "core/cuda_util.h"
#include "gemm/linear.h"

namespace s3d {
namespace {

using gemm::Epilogue;
using testing::ErrorStats;
using testing::random_tensor;

#define S3D_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine"

const char* name(Epilogue e) {
  return e == Epilogue::None ? "none" : e == Epilogue::Bias ? "bias" : "bias+gelu";
}

double g_worst_bf16 = 0, g_worst_f32 = 0;

// Runs one GEMM on the GPU into a poisoned output and compares rows against the CPU
// reference: every row up to 1000 rows, else the first and last 256 rows.
ErrorStats run_case(int64_t M, int64_t K, int64_t N, DType dt, Epilogue e, uint64_t seed) {
  Tensor x_h = random_tensor({M, K}, dt, seed);
  Tensor w_h = random_tensor({N, K}, dt, seed + 1, 1.0f / std::sqrt(static_cast<float>(K)));
  Tensor b_h = random_tensor({N}, dt, seed + 2, 0.5f);
  const Tensor* bias_h = e == Epilogue::None ? nullptr : &b_h;

  Tensor x = x_h.to(Device::CUDA), w = w_h.to(Device::CUDA), b = b_h.to(Device::CUDA);
  Tensor y = Tensor::empty({M, N}, dt, Device::CUDA);
  y.poison();
  const uint64_t calls = launch_counts().by_op["gemm"];
  gemm::linear(x, w, e == Epilogue::None ? nullptr : &b, y, e);
  synchronize();
  EXPECT_EQ(launch_counts().by_op["gemm"], calls + 1) << "one cuBLASLt call per linear";
  EXPECT_EQ(testing::count_poisoned(y), 0) << "elements the GEMM did not write";

  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (M <= 1000) {
    ranges = {{0, M}};
  } else {
    ranges = {{0, 256}, {M - 256, M}};
  }
  std::vector<float> got, want;
  for (auto [r0, r1] : ranges) {
    Tensor y_ref = Tensor::empty({r1 - r0, N}, dt, Device::CPU);
    gemm::linear(x_h.rows(r0, r1), w_h, bias_h, y_ref, e);
    std::vector<float> g = y.rows(r0, r1).to_floats(), c = y_ref.to_floats();
    got.insert(got.end(), g.begin(), g.end());
    want.insert(want.end(), c.begin(), c.end());
  }
  ErrorStats s = testing::compare(got, want);
  std::printf("[gemm] %s M=%lld K=%lld N=%lld %s: rel L2 %.3e, max abs %.3e\n", dtype_name(dt),
              static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N),
              name(e), s.rel_l2, s.max_abs);
  double& worst = dt == DType::BF16 ? g_worst_bf16 : g_worst_f32;
  worst = std::max(worst, s.rel_l2);
  EXPECT_EQ(s.non_finite, 0);
  EXPECT_LE(s.rel_l2, dt == DType::BF16 ? 1e-2 : 1e-5)
      << dtype_name(dt) << " M=" << M << " K=" << K << " N=" << N << " " << name(e);
  return s;
}

const int64_t kRows[] = {1, 7, 1000, 30227};

TEST(LinearGpu, Bf16ModelShapes) {
  S3D_REQUIRE_GPU();
  uint64_t seed = 1000;
  const std::pair<int64_t, int64_t> shapes[] = {
      {1536, 4608}, {1536, 1536}, {1024, 3072}, {1536, 8192}, {8192, 1536}};
  for (auto [K, N] : shapes)
    for (int64_t M : kRows) run_case(M, K, N, DType::BF16, Epilogue::Bias, seed += 10);
  for (int64_t M : kRows) run_case(M, 1536, 8192, DType::BF16, Epilogue::BiasGelu, seed += 10);
  for (int64_t M : kRows) run_case(M, 1536, 1536, DType::BF16, Epilogue::None, seed += 10);
  std::printf("[gemm] bf16 worst relative L2 error vs CPU: %.3e (tolerance 1e-2)\n", g_worst_bf16);
}

TEST(LinearGpu, F32ModelShapes) {
  S3D_REQUIRE_GPU();
  uint64_t seed = 2000;
  const std::pair<int64_t, int64_t> shapes[] = {{256, 1536}, {1536, 9216}, {32, 1536}, {1536, 32}};
  for (auto [K, N] : shapes)
    for (int64_t M : kRows) run_case(M, K, N, DType::F32, Epilogue::Bias, seed += 10);
  run_case(7, 1536, 32, DType::F32, Epilogue::BiasGelu, seed += 10);
  run_case(7, 1536, 32, DType::F32, Epilogue::None, seed += 10);
  std::printf("[gemm] f32 worst relative L2 error vs CPU: %.3e (tolerance 1e-5)\n", g_worst_f32);
}

TEST(LinearGpu, OddSizesAndUnalignedRowViews) {
  S3D_REQUIRE_GPU();
  // x starts one row into its storage: with K = 13 the pointer is only 2-byte aligned, so the
  // plan must be chosen for that alignment rather than cuBLASLt's default 256 bytes.
  const int64_t M = 33, K = 13, N = 37;
  for (DType dt : {DType::BF16, DType::F32}) {
    Tensor x_h = random_tensor({M + 1, K}, dt, 77);
    Tensor w_h = random_tensor({N, K}, dt, 78, 0.3f);
    Tensor b_h = random_tensor({N}, dt, 79);
    Tensor x_full = x_h.to(Device::CUDA);
    Tensor x = x_full.rows(1, M + 1);
    Tensor w = w_h.to(Device::CUDA), b = b_h.to(Device::CUDA);
    Tensor y = Tensor::empty({M, N}, dt, Device::CUDA);
    y.poison();
    gemm::linear(x, w, &b, y, Epilogue::BiasGelu);
    Tensor y_ref = Tensor::empty({M, N}, dt, Device::CPU);
    gemm::linear(x_h.rows(1, M + 1), w_h, &b_h, y_ref, Epilogue::BiasGelu);
    ErrorStats s = testing::compare(y.to_floats(), y_ref.to_floats());
    EXPECT_EQ(s.non_finite, 0);
    EXPECT_LE(s.rel_l2, dt == DType::BF16 ? 1e-2 : 1e-5) << dtype_name(dt);
  }
}

TEST(LinearGpu, MixedDevicesAreRejected) {
  S3D_REQUIRE_GPU();
  Tensor x = random_tensor({4, 16}, DType::BF16, 1).to(Device::CUDA);
  Tensor w = random_tensor({8, 16}, DType::BF16, 2);  // left on the host
  Tensor b = random_tensor({8}, DType::BF16, 3).to(Device::CUDA);
  Tensor y = Tensor::empty({4, 8}, DType::BF16, Device::CUDA);
  EXPECT_NE(testing::error_of([&] { gemm::linear(x, w, &b, y); }).find("different devices"),
            std::string::npos);
}

TEST(LinearGpu, Version) {
  S3D_REQUIRE_GPU();
  const std::string v = gemm::cublaslt_version();
  std::printf("[gemm] cuBLASLt %s\n", v.c_str());
  EXPECT_NE(v, "none");
}

}  // namespace
}  // namespace s3d
