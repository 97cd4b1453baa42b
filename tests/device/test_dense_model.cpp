// The dense family's kernels (SparseStructureFlowModel, docs/DENSE_MODEL.md) on the test device
// (tests/device_under_test.h): the volume <-> token transposes on odd sizes into poisoned
// outputs, bit for bit against the index formula (on the GPU also against the CPU's), and
// back; the unbiased guidance-rescale std, the CPU reference against the exact value and the
// device's against the CPU reference. The family's config, host tables, forward and public
// API are in tests/cpu/test_dense_model_cpu.cpp; the GPU against the CPU backend in
// tests/gpu/test_dense_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "device_contract.h"
#include "device_under_test.h"
#include "kernels/sampler_ops.h"
#include "kernels/volume_layout.h"
#include "test_numerics.h"

namespace s3d {
namespace {

using test::kTestDevice;
using test::kTestOnCuda;
using test::poisoned;
using testing::error_of;
using testing::random_tensor;

// tokens[(b N + n), c] == volume[b, c, n] for every element, raw bits (host tensors).
bool is_the_transpose(const Tensor& tokens, const Tensor& volume, int64_t B, int64_t C, int64_t N) {
  const float* pv = volume.data_as<float>();
  const float* pt = tokens.data_as<float>();
  bool ok = true;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t n = 0; n < N; ++n)
        ok &= testing::bits_equal(pt[(b * N + n) * C + c], pv[(b * C + c) * N + n]);
  return ok;
}

TEST(DenseLayout, VolumeTokenTransposesOnOddSizes) {
  S3D_TEST_DEVICE();
  for (auto [B, C, R] :
       {std::tuple{1, 8, 16}, {3, 5, 7}, {2, 33, 3}, {2, 33, 9}, {4, 8, 17}, {1, 1, 1}}) {
    const Shape vs = {B, C, R, R, R};
    const int64_t N = int64_t(R) * R * R;
    const std::string what = cat(B, "x", C, "x", R, " on ", device_name(kTestDevice));
    Tensor v = random_tensor(vs, DType::F32, 11 + B + C + R, 1.0f, 0.5f);
    Tensor tok = poisoned({B * N, C}, DType::F32, kTestDevice);
    kernels::volume_to_tokens(v.to(kTestDevice), tok);
    EXPECT_EQ(testing::count_poisoned(tok), 0) << what;
    const Tensor tok_host = tok.to(Device::CPU);
    EXPECT_TRUE(is_the_transpose(tok_host, v, B, C, N)) << what;
    if constexpr (kTestOnCuda) {  // and the CPU's transpose, bit for bit
      Tensor ref = Tensor::empty({B * N, C}, DType::F32, Device::CPU);
      kernels::volume_to_tokens(v, ref);
      EXPECT_TRUE(testing::bitwise_equal(tok_host, ref)) << what;
    }
    Tensor back = poisoned(vs, DType::F32, kTestDevice);
    kernels::tokens_to_volume(tok, back);
    EXPECT_TRUE(testing::bitwise_equal(back, v)) << what;
  }
  Tensor v = Tensor::zeros({2, 3, 4, 4, 4}, DType::F32, kTestDevice);
  Tensor wrong = Tensor::empty({128, 4}, DType::F32, kTestDevice);
  EXPECT_NE(error_of([&] { kernels::volume_to_tokens(v, wrong); }).find("[128, 3]"),
            std::string::npos);
}

// The exact unbiased std of asset b (rows offsets[b]..offsets[b + 1] of x, every column).
double exact_unbiased_std(const std::vector<float>& xv, const std::vector<int32_t>& offsets,
                          int64_t cols, int b) {
  const int64_t lo = offsets[b] * cols, hi = offsets[b + 1] * cols, n = hi - lo;
  long double mean = 0, ss = 0;
  for (int64_t i = lo; i < hi; ++i) mean += xv[i];
  mean /= n;
  for (int64_t i = lo; i < hi; ++i) ss += (xv[i] - mean) * (xv[i] - mean);
  return static_cast<double>(std::sqrt(ss / (n - 1)));
}

TEST(DenseSampler, UnbiasedStdDividesByNMinusOne) {
  S3D_TEST_DEVICE();
  struct Case {
    std::vector<int32_t> offsets;
    int64_t cols;
    uint64_t seed;
    float stddev, mean;
  };
  // A few rows of 7 columns; an asset of one row beside one of 4,096.
  for (const Case& c : {Case{{0, 3, 40}, 7, 5, 0.5f, 0.2f},
                        Case{{0, 1, 4096, 4096 + 333}, 8, 7, 0.9f, 0.1f}}) {
    const int B = static_cast<int>(c.offsets.size()) - 1;
    Tensor x = random_tensor({c.offsets.back(), c.cols}, DType::F32, c.seed, c.stddev, c.mean);
    Tensor off = Tensor::from_ints(c.offsets, {B + 1});
    // The CPU reference, against the exact value.
    Tensor ref = poisoned({B}, DType::F32, Device::CPU);
    kernels::asset_std(x, off, ref, true);
    const std::vector<float> xv = x.to_floats(), r = ref.to_floats();
    for (int b = 0; b < B; ++b) {
      const double exact = exact_unbiased_std(xv, c.offsets, c.cols, b);
      EXPECT_NEAR(r[b], exact, 2e-7 * exact) << "asset " << b << " of " << B;
    }
    // The test device into poisoned outputs, unbiased and not, against the reference.
    const Tensor x_d = x.to(kTestDevice), off_d = off.to(kTestDevice);
    Tensor unb = poisoned({B}, DType::F32, kTestDevice);
    Tensor pop = poisoned({B}, DType::F32, kTestDevice);
    kernels::asset_std(x_d, off_d, unb, true);
    kernels::asset_std(x_d, off_d, pop);
    const std::vector<float> u = unb.to_floats(), p = pop.to_floats();
    for (int b = 0; b < B; ++b) {
      EXPECT_NEAR(u[b], r[b], 1e-6 * std::fabs(r[b]) + 1e-30) << "asset " << b << " of " << B;
      EXPECT_NE(u[b], p[b]) << "asset " << b << " of " << B;
    }
  }
}

}  // namespace
}  // namespace s3d
