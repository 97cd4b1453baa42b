// CPU oracle of the sampler ops against fp64 formulas written here.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/sampler_ops.h"

namespace s3d {
namespace {

using test::matches_exact;
using test::random_tensor;
using test::throws_error;

const Shape kShapes[] = {{1, 32}, {7, 13}, {33, 200}};

Tensor empty_like(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), Device::CPU);
  out.poison();
  return out;
}

// Each fp32 product and sum rounds once: the error budget is two roundings of every term.
TEST(SamplerOpsCpu, ElementwiseOpsMatchFp64) {
  const float g = 7.5f, omg = -6.5f, dt = 0.0625f, a = 1.0f - 1e-5f, b = 0.37f;
  for (const Shape& s : kShapes) {
    Tensor x = random_tensor(s, DType::F32, 901);
    Tensor v = random_tensor(s, DType::F32, 902, 1.5f);
    const std::vector<float> xv = x.to_floats(), vv = v.to_floats();
    const size_t n = xv.size();
    std::vector<double> e(n), m(n);

    Tensor out = empty_like(x);
    kernels::cfg_combine(x, v, g, omg, out);
    for (size_t i = 0; i < n; ++i) {
      e[i] = double(g) * xv[i] + double(omg) * vv[i];
      m[i] = 2.0 * (std::fabs(g * xv[i]) + std::fabs(omg * vv[i]));
    }
    EXPECT_TRUE(matches_exact(out, e, m)) << "cfg_combine " << shape_str(s);

    out = empty_like(x);
    kernels::euler_step(x, v, dt, out);
    for (size_t i = 0; i < n; ++i) {
      e[i] = xv[i] - double(dt) * vv[i];
      m[i] = 2.0 * (std::fabs(xv[i]) + std::fabs(dt * vv[i]));
    }
    EXPECT_TRUE(matches_exact(out, e, m)) << "euler_step " << shape_str(s);

    out = empty_like(x);
    kernels::axpby_sub(x, a, v, b, out);
    for (size_t i = 0; i < n; ++i) {
      e[i] = double(a) * xv[i] - double(b) * vv[i];
      m[i] = 2.0 * (std::fabs(a * xv[i]) + std::fabs(b * vv[i]));
    }
    EXPECT_TRUE(matches_exact(out, e, m)) << "axpby_sub " << shape_str(s);

    out = empty_like(x);
    kernels::xstart_to_pred(x, a, v, b, out);
    for (size_t i = 0; i < n; ++i) {
      e[i] = (double(a) * xv[i] - vv[i]) / double(b);
      m[i] = 3.0 * (std::fabs(a * xv[i]) + std::fabs(vv[i])) / b;
    }
    EXPECT_TRUE(matches_exact(out, e, m)) << "xstart_to_pred " << shape_str(s);
  }
}

// Population std per asset over all of its rows and channels.
TEST(SamplerOpsCpu, AssetStdMatchesFp64) {
  const int64_t C = 32;
  const std::vector<int32_t> offsets = {0, 1, 8, 41, 1041};
  const int64_t T = offsets.back(), B = 4;
  Tensor x = random_tensor({T, C}, DType::F32, 903, 0.8f, 0.3f);
  Tensor off = Tensor::from_ints(offsets, {B + 1});
  Tensor out = Tensor::empty({B}, DType::F32, Device::CPU);
  out.poison();
  kernels::asset_std(x, off, out);
  const std::vector<float> xv = x.to_floats();
  std::vector<double> exact(B), mag(B, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t lo = offsets[b] * C, hi = offsets[b + 1] * C;
    long double mean = 0, ss = 0;
    for (int64_t i = lo; i < hi; ++i) mean += xv[i];
    mean /= (hi - lo);
    for (int64_t i = lo; i < hi; ++i) ss += (xv[i] - mean) * (xv[i] - mean);
    exact[b] = static_cast<double>(std::sqrt(ss / (hi - lo)));
  }
  EXPECT_TRUE(matches_exact(out, exact, mag));
}

TEST(SamplerOpsCpu, AssetStdOfEmptyAssetIsNan) {
  Tensor x = random_tensor({4, 8}, DType::F32, 1);
  Tensor off = Tensor::from_ints({0, 4, 4}, {3});
  Tensor out = Tensor::empty({2}, DType::F32, Device::CPU);
  kernels::asset_std(x, off, out);
  EXPECT_TRUE(std::isfinite(out.data_as<float>()[0]));
  EXPECT_TRUE(std::isnan(out.data_as<float>()[1]));
}

TEST(SamplerOpsCpu, GuidanceRescaleMatchesFp64) {
  const float rho = 0.7f, omr = 0.3f;
  const int64_t T = 33, C = 13, B = 3;
  Tensor x0 = random_tensor({T, C}, DType::F32, 904);
  Tensor sp = random_tensor({B}, DType::F32, 905, 0.2f, 1.0f);
  Tensor sc = random_tensor({B}, DType::F32, 906, 0.2f, 2.0f);
  std::vector<int32_t> bi(T);
  for (int64_t t = 0; t < T; ++t) bi[t] = static_cast<int32_t>(t * B / T);
  Tensor batch = Tensor::from_ints(bi, {T});
  Tensor out = empty_like(x0);
  kernels::guidance_rescale(x0, sp, sc, batch, rho, omr, out);
  const std::vector<float> xv = x0.to_floats(), spv = sp.to_floats(), scv = sc.to_floats();
  std::vector<double> exact(T * C), mag(T * C);
  for (int64_t t = 0; t < T; ++t) {
    const double ratio = double(spv[bi[t]]) / scv[bi[t]];
    for (int64_t c = 0; c < C; ++c) {
      const double x = xv[t * C + c];
      exact[t * C + c] = rho * (x * ratio) + omr * x;
      mag[t * C + c] = 4.0 * (std::fabs(rho * x * ratio) + std::fabs(omr * x));
    }
  }
  EXPECT_TRUE(matches_exact(out, exact, mag));
}

TEST(SamplerOpsCpu, RejectsBadArguments) {
  Tensor x = random_tensor({4, 8}, DType::F32, 1);
  Tensor v7 = random_tensor({4, 7}, DType::F32, 2);
  Tensor out = Tensor::empty({4, 8}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::cfg_combine(x, v7, 7.5f, -6.5f, out); },
                           {"cfg_combine", "v_uncond", "[4, 8]", "[4, 7]"}));
  Tensor xb = random_tensor({4, 8}, DType::BF16, 3);
  EXPECT_TRUE(throws_error([&] { kernels::euler_step(xb, x, 0.1f, out); },
                           {"euler_step", "x", "f32", "bf16"}));

  Tensor std_out = Tensor::empty({2}, DType::F32, Device::CPU);
  Tensor decreasing = Tensor::from_ints({0, 3, 2}, {3});
  EXPECT_TRUE(throws_error([&] { kernels::asset_std(x, decreasing, std_out); },
                           {"asset_std", "offsets[2] = 2", "[3, 4]"}));
  Tensor too_far = Tensor::from_ints({0, 2, 5}, {3});
  EXPECT_TRUE(throws_error([&] { kernels::asset_std(x, too_far, std_out); },
                           {"asset_std", "offsets[2] = 5", "x has 4 rows"}));
  Tensor std3 = Tensor::empty({3}, DType::F32, Device::CPU);
  Tensor off = Tensor::from_ints({0, 2, 4}, {3});
  EXPECT_TRUE(throws_error([&] { kernels::asset_std(x, off, std3); },
                           {"asset_std", "out", "[2]", "[3]"}));

  Tensor sp = Tensor::from_floats({1.0f, 1.0f}, {2}, DType::F32);
  Tensor bad_batch = Tensor::from_ints({0, 1, 2, 0}, {4});
  EXPECT_TRUE(throws_error(
      [&] { kernels::guidance_rescale(x, sp, sp, bad_batch, 0.7f, 0.3f, out); },
      {"guidance_rescale", "batch_index[2] = 2", "[0, 2)"}));
  Tensor short_batch = Tensor::from_ints({0, 1, 1}, {3});
  EXPECT_TRUE(throws_error(
      [&] { kernels::guidance_rescale(x, sp, sp, short_batch, 0.7f, 0.3f, out); },
      {"guidance_rescale", "batch_index", "[4]", "[3]"}));
}

}  // namespace
}  // namespace s3d
