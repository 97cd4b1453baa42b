// attention::sdpa_varlen on the CPU against an independent fp64 loop (tests/attention_reference.h,
// which the GPU tests check their longest sequences with); sequence layouts; and the boundary
// checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../attention_reference.h"
#include "../test_numerics.h"
#include "attention/attention.h"
#include "core/cuda_util.h"

namespace s3d {
namespace {

using attention::make_seq_layout;
using attention::sdpa_varlen;
using attention::SeqLayout;
using testing::error_of;
using testing::random_tensor;

using testing::total_length;

// fp64 attention over every query row: [Tq, H*D].
std::vector<double> reference(const RowView& q, const std::vector<int32_t>& q_lens,
                              const RowView& k, const RowView& v,
                              const std::vector<int32_t>& kv_lens, int H, int D, double scale) {
  const std::vector<float> qf = q.base.to_floats(), kf = k.base.to_floats(),
                           vf = v.base.to_floats();
  auto at = [](const std::vector<float>& f, const RowView& r, int64_t row, int64_t col) {
    return static_cast<double>(f[r.offset + row * r.stride + col]);
  };
  std::vector<double> out(total_length(q_lens) * H * D, 0.0);
  int64_t q0 = 0, kv0 = 0;
  for (size_t b = 0; b < q_lens.size(); ++b) {
    for (int64_t i = 0; i < q_lens[b]; ++i) {
      for (int h = 0; h < H; ++h) {
        testing::fp64_attention_head(
            [&](int d) { return at(qf, q, q0 + i, h * D + d); },
            [&](int64_t j, int d) { return at(kf, k, kv0 + j, h * D + d); },
            [&](int64_t j, int d) { return at(vf, v, kv0 + j, h * D + d); }, kv_lens[b], D,
            scale, &out[(q0 + i) * H * D + h * D]);
      }
    }
    q0 += q_lens[b];
    kv0 += kv_lens[b];
  }
  return out;
}

// Runs the CPU path into a poisoned output and compares with fp64: the bf16 output is one
// rounding (2^-9 relative) of an fp32 computation.
void run_and_check(const RowView& q, const std::vector<int32_t>& q_lens, const RowView& k,
                   const RowView& v, const std::vector<int32_t>& kv_lens, int H, int D,
                   float scale) {
  SeqLayout ql = make_seq_layout(q_lens, Device::CPU), kl = make_seq_layout(kv_lens, Device::CPU);
  Tensor out = Tensor::empty({ql.total(), static_cast<int64_t>(H) * D}, DType::BF16, Device::CPU);
  out.poison();
  sdpa_varlen(q, ql, k, v, kl, H, D, scale, out);
  EXPECT_EQ(testing::count_poisoned(out), 0);
  const std::vector<double> want = reference(q, q_lens, k, v, kv_lens, H, D, scale);
  const std::vector<float> got = out.to_floats();
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = 0x1p-8 * std::fabs(want[i]) + 1e-5;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST(SeqLayout, OffsetsAndDeviceTensors) {
  SeqLayout l = make_seq_layout({3, 0, 5}, Device::CPU);
  EXPECT_EQ(l.batch(), 3);
  EXPECT_EQ(l.total(), 8);
  EXPECT_EQ(l.max_len, 5);
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 3, 3, 8}));
  EXPECT_EQ(l.cu_seqlens.to_floats(), (std::vector<float>{0, 3, 3, 8}));
  EXPECT_EQ(l.seq_lens.to_floats(), (std::vector<float>{3, 0, 5}));
  EXPECT_EQ(l.cu_seqlens.dtype(), DType::I32);
}

TEST(SeqLayout, RejectsBadLengths) {
  EXPECT_NE(error_of([] {
              make_seq_layout({4, -1}, Device::CPU);
            }).find("negative length -1"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_seq_layout({}, Device::CPU); }).find("no sequences"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              make_seq_layout({2000000000, 2000000000}, Device::CPU);
            }).find("int32"),
            std::string::npos);
}

TEST(SdpaCpu, SelfAttentionFromPackedQkv) {
  for (auto [H, D] : {std::pair<int, int>{2, 16}, {3, 5}}) {
    for (const std::vector<int32_t>& lens :
         {std::vector<int32_t>{1, 7, 30}, {1}, {13, 1, 2}, {200, 57}}) {
      SCOPED_TRACE(cat("H=", H, " D=", D, " lengths ", lens.size()));
      const int64_t T = total_length(lens), HD = H * D;
      Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, 11 + T);
      RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
      run_and_check(q, lens, k, v, lens, H, D, 1.0f / std::sqrt(static_cast<float>(D)));
    }
  }
}

TEST(SdpaCpu, CrossAttentionRaggedQueriesDenseKeys) {
  const int H = 2, D = 8, L = 5;
  const std::vector<int32_t> q_lens{1, 7, 30}, kv_lens(3, L);
  const int64_t T = total_length(q_lens), HD = H * D, B = 3;
  Tensor q = random_tensor({T, H, D}, DType::BF16, 21);
  Tensor kv = random_tensor({B, L, 2, H, D}, DType::BF16, 22);
  RowView qv = RowView::of(q.reshape({T, HD}));
  RowView k{kv, 0, B * L, HD, 2 * HD}, v{kv, HD, B * L, HD, 2 * HD};
  run_and_check(qv, q_lens, k, v, kv_lens, H, D, 0.3f);
}

TEST(SdpaCpu, KeysAndValuesWithDifferentStrides) {
  const int H = 2, D = 8;
  const std::vector<int32_t> q_lens{4, 2}, kv_lens{3, 6};
  const int64_t HD = H * D;
  Tensor q = random_tensor({6, HD}, DType::BF16, 31);
  Tensor k = random_tensor({9, HD}, DType::BF16, 32);
  Tensor kv = random_tensor({9, 2 * HD}, DType::BF16, 33);
  run_and_check(RowView::of(q), q_lens, RowView::of(k), RowView{kv, HD, 9, HD, 2 * HD}, kv_lens, H,
                D, 0.25f);
}

TEST(SdpaCpu, LargeScoresStayFinite) {
  // Scores in the hundreds overflow exp() without the max subtraction.
  const int H = 1, D = 16;
  const std::vector<int32_t> lens{9, 4};
  Tensor qkv = random_tensor({13, 3 * H * D}, DType::BF16, 41, 3.0f);
  run_and_check(RowView{qkv, 0, 13, D, 3 * D}, lens, RowView{qkv, D, 13, D, 3 * D},
                RowView{qkv, 2 * D, 13, D, 3 * D}, lens, H, D, 8.0f);
}

TEST(SdpaCpu, EmptyQuerySequenceIsFine) {
  const int H = 2, D = 4;
  const std::vector<int32_t> q_lens{3, 0, 4}, kv_lens{2, 5, 1};
  Tensor q = random_tensor({7, H * D}, DType::BF16, 51);
  Tensor k = random_tensor({8, H * D}, DType::BF16, 52);
  Tensor v = random_tensor({8, H * D}, DType::BF16, 53);
  run_and_check(RowView::of(q), q_lens, RowView::of(k), RowView::of(v), kv_lens, H, D, 0.5f);
}

TEST(SdpaCpu, RejectsBadArguments) {
  const int H = 2, D = 4, HD = H * D;
  SeqLayout l = make_seq_layout({2, 3}, Device::CPU);
  Tensor qkv = random_tensor({5, 3 * HD}, DType::BF16, 61);
  RowView q{qkv, 0, 5, HD, 3 * HD}, k{qkv, HD, 5, HD, 3 * HD}, v{qkv, 2 * HD, 5, HD, 3 * HD};
  Tensor out = Tensor::empty({5, HD}, DType::BF16, Device::CPU);
  auto msg = [&](auto&& f) { return error_of(f); };
  const auto npos = std::string::npos;

  SeqLayout empty_kv = make_seq_layout({2, 0}, Device::CPU);
  RowView k2{qkv, HD, 2, HD, 3 * HD}, v2{qkv, 2 * HD, 2, HD, 3 * HD};
  EXPECT_NE(msg([&] {
              sdpa_varlen(q, l, k2, v2, empty_kv, H, D, 1.0f, out);
            }).find("sequence 1 has no keys"),
            npos);

  RowView v_oob{qkv, 2 * HD + 1, 5, HD, 3 * HD};  // last row runs one element past the end
  EXPECT_NE(msg([&] { sdpa_varlen(q, l, k, v_oob, l, H, D, 1.0f, out); }).find("reaches element"),
            npos);
  RowView q_cols{qkv, 0, 5, HD - 1, 3 * HD};
  EXPECT_NE(msg([&] { sdpa_varlen(q_cols, l, k, v, l, H, D, 1.0f, out); }).find("rows of"), npos);
  RowView q_rows{qkv, 0, 4, HD, 3 * HD};
  EXPECT_NE(msg([&] { sdpa_varlen(q_rows, l, k, v, l, H, D, 1.0f, out); }).find("rows of"), npos);
  Tensor qf = random_tensor({5, HD}, DType::F32, 62);
  EXPECT_NE(
      msg([&] { sdpa_varlen(RowView::of(qf), l, k, v, l, H, D, 1.0f, out); }).find("expected bf16"),
      npos);
  SeqLayout three = make_seq_layout({1, 1, 3}, Device::CPU);
  EXPECT_NE(msg([&] { sdpa_varlen(q, l, k, v, three, H, D, 1.0f, out); }).find("kv_layout has 3"),
            npos);
  Tensor out_bad = Tensor::empty({5, HD + 1}, DType::BF16, Device::CPU);
  EXPECT_NE(msg([&] { sdpa_varlen(q, l, k, v, l, H, D, 1.0f, out_bad); }).find("sdpa_varlen: out"),
            npos);
  EXPECT_NE(msg([&] { sdpa_varlen(q, l, k, v, l, 0, D, 1.0f, out); }).find("must be positive"),
            npos);
  SeqLayout not_made;
  EXPECT_NE(msg([&] {
              sdpa_varlen(q, not_made, k, v, l, H, D, 1.0f, out);
            }).find("not a layout from make_seq_layout"),
            npos);
}

TEST(SdpaCpu, VersionWithoutGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; the version is checked by GPU tests";
  EXPECT_EQ(attention::cudnn_version(), "none");
  EXPECT_EQ(attention::sdpa_graphs_built(), 0);
}

}  // namespace
}  // namespace s3d
