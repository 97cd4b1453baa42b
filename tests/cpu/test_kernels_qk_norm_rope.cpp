// CPU oracle of head_rmsnorm, rope_phases and rope_apply against fp64 formulas written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/qk_norm_rope.h"

namespace s3d {
namespace {

using test::matches_exact;
using test::random_tensor;
using test::throws_error;

// head_rmsnorm on the q (slot 0) and k (slot 1) parts of a packed [T, 3, H, D] buffer.
void check_head_rmsnorm(int64_t T, int H, int D, bool zero_head) {
  Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, 400 + D, 1.5f);
  if (zero_head) {  // head 0 of token 0 in the k slot: norm 0, clamped to 1e-12, y = 0
    auto* p = qkv.data_as<uint16_t>();
    for (int d = 0; d < D; ++d) p[H * D + d] = 0;
  }
  Tensor gamma = random_tensor({H, D}, DType::F32, 500 + D, 0.3f, 1.0f);
  const std::vector<float> xv = qkv.to_floats(), gv = gamma.to_floats();
  const double scale = std::sqrt(static_cast<double>(D));
  for (int slot : {0, 1}) {
    Tensor out = Tensor::empty({T, H, D}, DType::BF16, Device::CPU);
    out.poison();
    kernels::head_rmsnorm(RowView::columns(qkv, slot * H * D, H * D), gamma, H, D, out);
    std::vector<double> exact(T * H * D), mag(T * H * D);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const float* x = &xv[(t * 3 + slot) * H * D + h * D];
        double sum_sq = 0.0;
        for (int d = 0; d < D; ++d) sum_sq += static_cast<double>(x[d]) * x[d];
        const double norm = std::fmax(std::sqrt(sum_sq), 1e-12);
        for (int d = 0; d < D; ++d) {
          const int64_t i = (t * H + h) * D + d;
          exact[i] = x[d] / norm * gv[h * D + d] * scale;
          mag[i] = 8.0 * std::fabs(exact[i]);  // norm, division, two products, sqrt(D) rounding
        }
      }
    }
    EXPECT_TRUE(matches_exact(out, exact, mag)) << "T " << T << " H " << H << " D " << D
                                                << " slot " << slot;
  }
}

TEST(QkNormRopeCpu, HeadRmsNormMatchesFp64) {
  for (int64_t T : {1, 7, 33}) {
    check_head_rmsnorm(T, 2, 64, false);
    check_head_rmsnorm(T, 3, 10, false);  // D not a multiple of 4
  }
  check_head_rmsnorm(3, 12, 128, true);
}

// fp64 phases; the op builds its frequencies in fp32 (powf of an fp32 exponent: up to ~12
// ulps), so the phase error grows with |phase| and passes into cos/sin unattenuated.
void check_rope_phases(int64_t T, int head_dim) {
  const int half = head_dim / 2, fd = half / 3;
  Tensor coords = test::random_coords(T, 600 + head_dim);
  Tensor cos_out = Tensor::empty({T, half}, DType::F32, Device::CPU);
  Tensor sin_out = Tensor::empty({T, half}, DType::F32, Device::CPU);
  cos_out.poison();
  sin_out.poison();
  kernels::rope_phases(coords, head_dim, 1.0f, 10000.0f, cos_out, sin_out);
  const int32_t* c = coords.data_as<int32_t>();
  std::vector<double> ec(T * half), es(T * half), mag(T * half);
  for (int64_t t = 0; t < T; ++t) {
    for (int p = 0; p < half; ++p) {
      double phase = 0.0;
      if (p < 3 * fd) phase = c[t * 4 + 1 + p / fd] / std::pow(10000.0, double(p % fd) / fd);
      ec[t * half + p] = std::cos(phase);
      es[t * half + p] = std::sin(phase);
      mag[t * half + p] = 16.0 * std::fabs(phase) + 4.0;
    }
  }
  EXPECT_TRUE(matches_exact(cos_out, ec, mag)) << "cos T " << T << " head_dim " << head_dim;
  EXPECT_TRUE(matches_exact(sin_out, es, mag)) << "sin T " << T << " head_dim " << head_dim;
}

TEST(QkNormRopeCpu, RopePhasesMatchFp64) {
  for (int64_t T : {1, 7, 33}) {
    check_rope_phases(T, 128);  // 21 frequencies, 63 phases + 1 padding phase
    check_rope_phases(T, 64);   // 10 frequencies, 30 phases + 2 padding
    check_rope_phases(T, 10);   // 1 frequency, 3 phases + 2 padding
  }
  check_rope_phases(5, 2);  // no frequency at all: cos 1, sin 0 everywhere
}

TEST(QkNormRopeCpu, RopePaddingPhasesAreExactlyCosOneSinZero) {
  Tensor coords = test::random_coords(7, 1);
  Tensor cos_out = Tensor::empty({7, 64}, DType::F32, Device::CPU);
  Tensor sin_out = Tensor::empty({7, 64}, DType::F32, Device::CPU);
  kernels::rope_phases(coords, 128, 1.0f, 10000.0f, cos_out, sin_out);
  for (int64_t t = 0; t < 7; ++t) {
    EXPECT_EQ(cos_out.data_as<float>()[t * 64 + 63], 1.0f);
    EXPECT_EQ(sin_out.data_as<float>()[t * 64 + 63], 0.0f);
  }
}

void check_rope_apply(int64_t T, int H, int D) {
  const int half = D / 2;
  Tensor x = random_tensor({T, H, D}, DType::BF16, 700 + D, 2.0f);
  // cos/sin of arbitrary angles, as rope_phases would produce them.
  const std::vector<float> angles = random_tensor({T * half}, DType::F32, 701 + D, 10.0f).to_floats();
  std::vector<float> cv(angles.size()), sv(angles.size());
  for (size_t i = 0; i < angles.size(); ++i) {
    cv[i] = std::cos(angles[i]);
    sv[i] = std::sin(angles[i]);
  }
  Tensor cos_t = Tensor::from_floats(cv, {T, half}, DType::F32);
  Tensor sin_t = Tensor::from_floats(sv, {T, half}, DType::F32);
  Tensor out = Tensor::empty({T, H, D}, DType::BF16, Device::CPU);
  out.poison();
  kernels::rope_apply(x, cos_t, sin_t, out);
  const std::vector<float> xv = x.to_floats();
  std::vector<double> exact(xv.size()), mag(xv.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      for (int p = 0; p < half; ++p) {
        const int64_t i = (t * H + h) * D + 2 * p;
        const double a = xv[i], b = xv[i + 1], c = cv[t * half + p], s = sv[t * half + p];
        exact[i] = a * c - b * s;
        exact[i + 1] = a * s + b * c;
        mag[i] = mag[i + 1] = 2.0 * (std::fabs(a) + std::fabs(b));
      }
    }
  }
  EXPECT_TRUE(matches_exact(out, exact, mag)) << "T " << T << " H " << H << " D " << D;
}

TEST(QkNormRopeCpu, RopeApplyMatchesFp64) {
  for (int64_t T : {1, 7, 33}) {
    check_rope_apply(T, 2, 64);
    check_rope_apply(T, 3, 10);
  }
}

TEST(QkNormRopeCpu, RopeApplyInPlace) {
  Tensor x = random_tensor({7, 2, 64}, DType::BF16, 9);
  Tensor c = random_tensor({7, 32}, DType::F32, 10, 0.5f);
  Tensor s = random_tensor({7, 32}, DType::F32, 11, 0.5f);
  Tensor out = Tensor::empty({7, 2, 64}, DType::BF16, Device::CPU);
  kernels::rope_apply(x, c, s, out);
  kernels::rope_apply(x, c, s, x);
  EXPECT_EQ(std::memcmp(x.data(), out.data(), out.nbytes()), 0);
}

TEST(QkNormRopeCpu, RejectsBadArguments) {
  Tensor qkv = random_tensor({4, 3, 2, 8}, DType::BF16, 1);
  Tensor gamma = random_tensor({2, 8}, DType::F32, 2);
  Tensor out = Tensor::empty({4, 2, 8}, DType::BF16, Device::CPU);
  RowView q = RowView::columns(qkv, 0, 16);
  EXPECT_TRUE(throws_error([&] { kernels::head_rmsnorm(q, gamma, 2, 7, out); },
                           {"head_rmsnorm", "heads * head_dim = 14", "16"}));
  Tensor gamma_wrong = random_tensor({8, 2}, DType::F32, 3);
  EXPECT_TRUE(throws_error([&] { kernels::head_rmsnorm(q, gamma_wrong, 2, 8, out); },
                           {"head_rmsnorm", "gamma", "[2, 8]", "[8, 2]"}));
  Tensor out_f32 = Tensor::empty({4, 2, 8}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::head_rmsnorm(q, gamma, 2, 8, out_f32); },
                           {"head_rmsnorm", "out", "bf16"}));
  RowView past_end{qkv, 40, 4, 16, 48};  // the v slot plus 8: reaches element 200 of 192
  EXPECT_TRUE(throws_error([&] { kernels::head_rmsnorm(past_end, gamma, 2, 8, out); },
                           {"head_rmsnorm", "x", "reaches element 200"}));

  Tensor coords3 = Tensor::from_ints(std::vector<int32_t>(12, 0), {4, 3});
  Tensor cs = Tensor::empty({4, 4}, DType::F32, Device::CPU);
  Tensor sn = Tensor::empty({4, 4}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::rope_phases(coords3, 8, 1.0f, 10000.0f, cs, sn); },
                           {"rope_phases", "coords", "[T, 4]"}));
  Tensor coords = Tensor::from_ints(std::vector<int32_t>(16, 0), {4, 4});
  EXPECT_TRUE(throws_error([&] { kernels::rope_phases(coords, 7, 1.0f, 10000.0f, cs, sn); },
                           {"rope_phases", "even", "7"}));
  EXPECT_TRUE(throws_error([&] { kernels::rope_phases(coords, 16, 1.0f, 10000.0f, cs, sn); },
                           {"rope_phases", "cos_out", "[4, 8]"}));

  Tensor x = random_tensor({4, 2, 8}, DType::BF16, 4);
  Tensor cs_wrong = Tensor::empty({4, 3}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::rope_apply(x, cs_wrong, sn, out); },
                           {"rope_apply", "cos", "[4, 4]", "[4, 3]"}));
  Tensor x_odd = random_tensor({4, 2, 7}, DType::BF16, 4);
  EXPECT_TRUE(throws_error([&] { kernels::rope_apply(x_odd, cs, sn, out); },
                           {"rope_apply", "D even"}));
}

}  // namespace
}  // namespace s3d
