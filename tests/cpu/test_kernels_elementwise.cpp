// CPU oracle of the elementwise ops against fp64 formulas written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/elementwise.h"

namespace s3d {
namespace {

using test::matches_exact;
using test::random_tensor;
using test::throws_error;

const DType kFloatTypes[] = {DType::BF16, DType::F32};
const Shape kShapes[] = {{1, 13}, {7, 200}, {33, 13}, {3, 5, 8}};

std::string label(const Shape& s, DType a, DType b, DType out) {
  return cat(shape_str(s), " ", dtype_name(a), " ", dtype_name(b), " -> ", dtype_name(out));
}

TEST(ElementwiseCpu, CastIsExactRoundToNearestEven) {
  for (const Shape& s : kShapes) {
    for (DType in : kFloatTypes) {
      for (DType out_t : kFloatTypes) {
        Tensor x = random_tensor(s, in, 11, 3.0f);
        Tensor out = Tensor::empty(s, out_t, Device::CPU);
        out.poison();
        kernels::cast(x, out);
        const std::vector<float> xv = x.to_floats(), ov = out.to_floats();
        for (size_t i = 0; i < xv.size(); ++i) {
          const double want = out_t == DType::BF16 ? test::round_to_bf16(xv[i]) : xv[i];
          ASSERT_EQ(ov[i], want) << label(s, in, in, out_t) << " element " << i;
        }
      }
    }
  }
}

TEST(ElementwiseCpu, CastTiesGoToEven) {
  // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: even is 1. 1 + 3 * 2^-8 lies between
  // 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6. Negative and just-above-halfway cases too.
  const std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f),
                                 1.0f + 0x1p-8f + 0x1p-20f};
  const std::vector<double> want = {1.0, 1.0 + 0x1p-6, -1.0, 1.0 + 0x1p-7};
  Tensor x = Tensor::from_floats(in, {4}, DType::F32);
  Tensor out = Tensor::empty({4}, DType::BF16, Device::CPU);
  out.poison();
  kernels::cast(x, out);
  const std::vector<float> got = out.to_floats();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

// add and mul over every dtype mix, same-shape and broadcast-row b.
TEST(ElementwiseCpu, AddMulMatchFp64) {
  for (const Shape& s : kShapes) {
    const int64_t C = s.back();
    for (bool broadcast : {false, true}) {
      const Shape bs = broadcast ? Shape{C} : s;
      for (DType ta : kFloatTypes) {
        for (DType tb : kFloatTypes) {
          for (DType to : kFloatTypes) {
            Tensor a = random_tensor(s, ta, 21, 2.0f);
            Tensor b = random_tensor(bs, tb, 22, 2.0f);
            const std::vector<float> av = a.to_floats(), bv = b.to_floats();
            std::vector<double> sum(av.size()), prod(av.size()), sum_mag(av.size()),
                prod_mag(av.size());
            for (size_t i = 0; i < av.size(); ++i) {
              const double x = av[i], y = bv[broadcast ? i % C : i];
              sum[i] = x + y;
              sum_mag[i] = std::fabs(x) + std::fabs(y);
              prod[i] = x * y;
              prod_mag[i] = std::fabs(x * y);
            }
            Tensor out = Tensor::empty(s, to, Device::CPU);
            out.poison();
            kernels::add(a, b, out);
            EXPECT_TRUE(matches_exact(out, sum, sum_mag)) << "add " << label(s, ta, tb, to);
            out.poison();
            kernels::mul(a, b, out);
            EXPECT_TRUE(matches_exact(out, prod, prod_mag)) << "mul " << label(s, ta, tb, to);
          }
        }
      }
    }
  }
}

TEST(ElementwiseCpu, AddInPlaceEqualsOutOfPlace) {
  Tensor a = random_tensor({7, 200}, DType::BF16, 31);
  Tensor b = random_tensor({7, 200}, DType::BF16, 32);
  Tensor out = Tensor::empty({7, 200}, DType::BF16, Device::CPU);
  kernels::add(a, b, out);
  kernels::add(a, b, a);
  EXPECT_EQ(std::memcmp(a.data(), out.data(), out.nbytes()), 0);
}

// `1 + scale` on one chunk of a [B, 6C] modulation tensor, read through a row view.
TEST(ElementwiseCpu, AddScalarOnStridedChunk) {
  for (DType in : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (int64_t C : {13, 200}) {
        const int64_t B = 3;
        Tensor mod = random_tensor({B, 6 * C}, in, 41, 0.5f);
        RowView chunk = RowView::columns(mod, C, C);  // scale_msa
        Tensor out = Tensor::empty({B, C}, to, Device::CPU);
        out.poison();
        kernels::add_scalar(chunk, 1.0f, out);
        const std::vector<float> mv = mod.to_floats();
        std::vector<double> exact(B * C), mag(B * C);
        for (int64_t r = 0; r < B; ++r) {
          for (int64_t c = 0; c < C; ++c) {
            exact[r * C + c] = mv[r * 6 * C + C + c] + 1.0;
            mag[r * C + c] = std::fabs(mv[r * 6 * C + C + c]) + 1.0;
          }
        }
        EXPECT_TRUE(matches_exact(out, exact, mag)) << dtype_name(in) << " -> " << dtype_name(to);
      }
    }
  }
}

// The eager `shift[batch_ids]`: rows of a strided [B, C] chunk copied bit for bit.
TEST(ElementwiseCpu, GatherRowsCopiesBits) {
  for (DType dt : kFloatTypes) {
    for (int64_t T : {1, 7, 33}) {
      const int64_t B = 4, C = 13;
      Tensor mod = random_tensor({B, 6 * C}, dt, 51);
      RowView chunk = RowView::columns(mod, 2 * C, C);
      Tensor index = test::random_ints({T}, 52, 0, static_cast<int>(B));
      Tensor out = Tensor::empty({T, C}, dt, Device::CPU);
      out.poison();
      kernels::gather_rows(chunk, index, out);
      const size_t es = dtype_size(dt);
      const auto* src = static_cast<const char*>(mod.data());
      const auto* dst = static_cast<const char*>(out.data());
      for (int64_t t = 0; t < T; ++t) {
        const int32_t b = index.data_as<int32_t>()[t];
        EXPECT_EQ(std::memcmp(dst + t * C * es, src + (b * 6 * C + 2 * C) * es, C * es), 0)
            << dtype_name(dt) << " row " << t;
      }
    }
  }
}

// q, k, v slots of a packed [T, 3, H, D] buffer copied into the matching slots of another
// buffer; the columns outside the destination view keep their poison.
TEST(ElementwiseCpu, CopyRowsBetweenStridedViews) {
  const int64_t T = 7, HD = 24;
  Tensor src = random_tensor({T, 3, 2, 12}, DType::BF16, 61);
  Tensor dst = Tensor::empty({T, 3, 2, 12}, DType::BF16, Device::CPU);
  dst.poison();
  RowView s = RowView::columns(src, HD, HD);  // k slot
  RowView d = RowView::columns(dst, 2 * HD, HD);  // v slot
  kernels::copy_rows(s, d);
  const auto* sp = src.data_as<uint16_t>();
  const auto* dp = dst.data_as<uint16_t>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < 3 * HD; ++c) {
      const uint16_t want = c >= 2 * HD ? sp[t * 3 * HD + HD + (c - 2 * HD)] : 0xFFFF;
      ASSERT_EQ(dp[t * 3 * HD + c], want) << "row " << t << " column " << c;
    }
  }
}

TEST(ElementwiseCpu, BroadcastRowCopiesBitsIntoEveryRow) {
  for (DType dt : kFloatTypes) {
    const int64_t C = 24;
    Tensor row = random_tensor({1, C}, dt, 67);
    Tensor base = Tensor::empty({9, C}, dt, Device::CPU);
    base.poison();
    Tensor out = base.rows(3, 8);  // a row slice, as the null rows of a batched tensor
    kernels::broadcast_row(row, out);
    const size_t es = dtype_size(dt);
    const auto* b = static_cast<const char*>(base.data());
    for (int64_t r = 0; r < 9; ++r) {
      const bool written = r >= 3 && r < 8;
      if (written) {
        ASSERT_EQ(std::memcmp(b + r * C * es, row.data(), C * es), 0) << dtype_name(dt) << " row " << r;
      } else {
        ASSERT_EQ(testing::count_poisoned(base.rows(r, r + 1)), C) << "row " << r << " was written";
      }
    }
  }
  Tensor out = Tensor::empty({4, 8}, DType::BF16, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::broadcast_row(random_tensor({1, 7}, DType::BF16, 1), out); },
                           {"broadcast_row", "one row"}));
  EXPECT_TRUE(throws_error([&] { kernels::broadcast_row(random_tensor({1, 8}, DType::F32, 1), out); },
                           {"broadcast_row"}));
}

TEST(ElementwiseCpu, SiluMatchesFp64) {
  for (const Shape& s : kShapes) {
    for (DType in : kFloatTypes) {
      for (DType to : kFloatTypes) {
        Tensor x = random_tensor(s, in, 71, 4.0f);
        Tensor out = Tensor::empty(s, to, Device::CPU);
        out.poison();
        kernels::silu(x, out);
        const std::vector<float> xv = x.to_floats();
        std::vector<double> exact(xv.size()), mag(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) {
          const double v = xv[i];
          exact[i] = v / (1.0 + std::exp(-v));
          mag[i] = 8.0 * std::fabs(exact[i]);  // expf, 1 + e, the division: a few ulps
        }
        EXPECT_TRUE(matches_exact(out, exact, mag)) << label(s, in, in, to);
      }
    }
  }
}

TEST(ElementwiseCpu, GeluTanhMatchesFp64) {
  const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
  for (const Shape& s : kShapes) {
    for (DType in : kFloatTypes) {
      for (DType to : kFloatTypes) {
        Tensor x = random_tensor(s, in, 81, 3.0f);
        Tensor out = Tensor::empty(s, to, Device::CPU);
        out.poison();
        kernels::gelu_tanh(x, out);
        const std::vector<float> xv = x.to_floats();
        std::vector<double> exact(xv.size()), mag(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) {
          const double v = xv[i];
          const double inner = beta * (v + kappa * v * v * v);
          exact[i] = 0.5 * v * (1.0 + std::tanh(inner));
          // fp32 inner (constants, cube, sums) and tanhf errors, scaled by 0.5|x|, where
          // 1 + tanh cancels for negative x; plus the final products.
          mag[i] = 0.5 * std::fabs(v) * (4.0 + 8.0 * std::fabs(inner)) + 4.0 * std::fabs(exact[i]);
        }
        EXPECT_TRUE(matches_exact(out, exact, mag)) << label(s, in, in, to);
      }
    }
  }
}

// ---- errors ----

TEST(ElementwiseCpu, RejectsBadShapesAndDtypes) {
  Tensor a = random_tensor({3, 4}, DType::F32, 1);
  Tensor b5 = random_tensor({3, 5}, DType::F32, 2);
  Tensor out = Tensor::empty({3, 4}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::add(a, b5, out); }, {"add", "b", "[3, 4]", "[3, 5]"}));
  Tensor out5 = Tensor::empty({3, 5}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::mul(a, a, out5); }, {"mul", "out", "[3, 4]"}));
  Tensor ints = Tensor::from_ints(std::vector<int32_t>(12, 1), {3, 4});
  EXPECT_TRUE(throws_error([&] { kernels::add(ints, a, out); }, {"add", "a", "bf16 or f32", "i32"}));
  EXPECT_TRUE(throws_error([&] { kernels::cast(a, out5); }, {"cast", "out"}));
  EXPECT_TRUE(throws_error([&] { kernels::silu(a, ints); }, {"silu", "out", "i32"}));
  EXPECT_TRUE(throws_error([&] { kernels::gelu_tanh(a, out5); }, {"gelu_tanh", "out", "[3, 4]"}));
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { kernels::gelu_tanh(undefined, out); }, {"gelu_tanh", "x", "missing"}));
}

TEST(ElementwiseCpu, GatherRejectsOutOfRangeIndex) {
  Tensor src = random_tensor({4, 13}, DType::BF16, 1);
  Tensor out = Tensor::empty({3, 13}, DType::BF16, Device::CPU);
  for (int bad : {4, -1}) {
    Tensor index = Tensor::from_ints({0, 3, bad}, {3});
    EXPECT_TRUE(throws_error([&] { kernels::gather_rows(RowView::of(src), index, out); },
                             {"gather_rows", "index[2]", "outside [0, 4)"}))
        << bad;
  }
  Tensor index = Tensor::from_ints({0, 1, 2}, {3});
  Tensor wrong_dtype = Tensor::empty({3, 13}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::gather_rows(RowView::of(src), index, wrong_dtype); },
                           {"gather_rows", "out", "bf16"}));
  Tensor float_index = Tensor::from_floats({0, 1, 2}, {3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { kernels::gather_rows(RowView::of(src), float_index, out); },
                           {"gather_rows", "index", "i32"}));
}

TEST(ElementwiseCpu, RejectsRowViewsOutOfBounds) {
  Tensor t = random_tensor({4, 16}, DType::F32, 1);
  RowView past_end{t, 8, 4, 16, 16};  // last row would end at element 72 of 64
  Tensor out = Tensor::empty({4, 16}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::add_scalar(past_end, 1.0f, out); },
                           {"add_scalar", "x", "reaches element 72"}));
  RowView narrow_stride{t, 0, 4, 16, 8};
  EXPECT_TRUE(throws_error([&] { kernels::add_scalar(narrow_stride, 1.0f, out); },
                           {"add_scalar", "x", "malformed"}));
  RowView ok = RowView::of(t);
  RowView dst{out, 4, 4, 16, 16};
  EXPECT_TRUE(throws_error([&] { kernels::copy_rows(ok, dst); }, {"copy_rows", "dst", "reaches"}));
  RowView dst_narrow{out, 0, 4, 15, 16};
  EXPECT_TRUE(throws_error([&] { kernels::copy_rows(ok, dst_narrow); }, {"copy_rows", "4 x 16"}));
}

}  // namespace
}  // namespace s3d
