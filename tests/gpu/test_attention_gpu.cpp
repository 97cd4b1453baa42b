// attention::sdpa_varlen on the GPU (cuDNN SDPA, ragged strided views) against the CPU
// reference. Tolerance: relative L2 error vs CPU <= 2e-2 (cuDNN rounds the probabilities to
// bf16 before P.V; the CPU keeps fp32); the max absolute error is printed with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../attention_reference.h"
#include "../test_numerics.h"
#include "attention/attention.h"
#include "attention/cudnn_sdpa.h"
#include "core/bf16.h"
#include "core/cuda_util.h"

namespace s3d {
namespace {

using attention::make_seq_layout;
using attention::sdpa_varlen;
using attention::SeqLayout;
using testing::ErrorStats;
using testing::random_tensor;

#define S3D_REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device on this machine"

constexpr double kTolerance = 2e-2;

using testing::total_length;

RowView on(const Tensor& base, const RowView& like) {
  return RowView{base, like.offset, like.rows, like.cols, like.stride};
}

void report(const char* what, const ErrorStats& s) {
  std::printf("[sdpa] %s: rel L2 %.3e, max abs %.3e\n", what, s.rel_l2, s.max_abs);
  EXPECT_EQ(s.non_finite, 0) << what;
  EXPECT_LE(s.rel_l2, kTolerance) << what;
}

// q, k, v are views into host tensors; q_dev_base / kv_dev_base hold the same bytes on the
// device (the same tensor for self-attention). Runs both paths; returns the GPU's error.
ErrorStats gpu_vs_cpu(const RowView& q, const RowView& k, const RowView& v,
                      const Tensor& q_dev_base, const Tensor& kv_dev_base,
                      const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens,
                      int H, int D, float scale, Tensor* out_dev = nullptr) {
  SeqLayout ql_h = make_seq_layout(q_lens, Device::CPU),
            kl_h = make_seq_layout(kv_lens, Device::CPU);
  const int64_t T = ql_h.total(), HD = static_cast<int64_t>(H) * D;
  Tensor ref = Tensor::empty({T, HD}, DType::BF16, Device::CPU);
  sdpa_varlen(q, ql_h, k, v, kl_h, H, D, scale, ref);

  SeqLayout ql = make_seq_layout(q_lens, Device::CUDA), kl = make_seq_layout(kv_lens, Device::CUDA);
  Tensor own;
  if (out_dev == nullptr) {
    own = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
    own.poison();
    out_dev = &own;
  }
  const uint64_t calls = launch_counts().by_op["sdpa"];
  sdpa_varlen(on(q_dev_base, q), ql, on(kv_dev_base, k), on(kv_dev_base, v), kl, H, D, scale,
              *out_dev);
  synchronize();
  EXPECT_EQ(launch_counts().by_op["sdpa"], calls + 1) << "one cuDNN call per sdpa_varlen";
  EXPECT_EQ(testing::count_poisoned(*out_dev), 0) << "output rows cuDNN did not write";
  return testing::compare(out_dev->to_floats(), ref.to_floats());
}

// Self-attention read straight out of a packed [T, 3, H, D] buffer (token stride 3HD).
ErrorStats self_attention(const std::vector<int32_t>& lens, int H, int D, uint64_t seed) {
  const int64_t T = total_length(lens), HD = static_cast<int64_t>(H) * D;
  Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, seed);
  Tensor qkv_d = qkv.to(Device::CUDA);
  RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
  return gpu_vs_cpu(q, k, v, qkv_d, qkv_d, lens, lens, H, D,
                    1.0f / std::sqrt(static_cast<float>(D)));
}

TEST(SdpaGpu, SelfAttentionPackedQkv) {
  S3D_REQUIRE_GPU();
  uint64_t seed = 300;
  for (auto [H, D] : {std::pair<int, int>{12, 128}, {2, 64}}) {
    for (const std::vector<int32_t>& lens :
         {std::vector<int32_t>{1}, {1, 7, 300}, {1000, 1}, {64, 65, 63, 129}}) {
      ErrorStats s = self_attention(lens, H, D, seed += 10);
      report(cat("self H=", H, " D=", D, " B=", lens.size(), " T=", total_length(lens)).c_str(), s);
    }
  }
}

TEST(SdpaGpu, CrossAttentionRaggedQueriesDenseKeyValues) {
  S3D_REQUIRE_GPU();
  uint64_t seed = 400;
  for (auto [H, D] : {std::pair<int, int>{12, 128}, {2, 64}}) {
    for (auto [q_lens, L] :
         {std::pair<std::vector<int32_t>, int32_t>{{1, 7, 300}, 77}, {{1000, 1}, 4101}}) {
      const int64_t T = total_length(q_lens), HD = static_cast<int64_t>(H) * D;
      const int64_t B = static_cast<int64_t>(q_lens.size());
      Tensor q = random_tensor({T, H, D}, DType::BF16, seed += 10);
      Tensor kv = random_tensor({B, L, 2, H, D}, DType::BF16, seed += 10);
      Tensor q_d = q.to(Device::CUDA), kv_d = kv.to(Device::CUDA);
      RowView qv{q, 0, T, HD, HD}, k{kv, 0, B * L, HD, 2 * HD}, v{kv, HD, B * L, HD, 2 * HD};
      ErrorStats s = gpu_vs_cpu(qv, k, v, q_d, kv_d, q_lens, std::vector<int32_t>(B, L), H, D,
                                1.0f / std::sqrt(static_cast<float>(D)));
      report(cat("cross H=", H, " D=", D, " B=", B, " T=", T, " L=", L).c_str(), s);
    }
  }
}

// The backend sees ragged tensors as [B, H, S_bucket, D] plus offsets, so it could address up
// to S_bucket rows past the start of the last sequence. Put 1024 guard rows (more than twice
// the bucket) after the last real row of Q, K, V and O: the output must match the CPU and the
// output guard must stay untouched. Finite guard values check the padding mask (garbage keys
// must get zero weight); NaN guard values also fail if the kernel merely reads those rows
// (0 * NaN = NaN in P.V), which would make the engine depend on what lies after its buffers.
void guarded_self_attention(bool nan_guard) {
  const int H = 12, D = 128;
  const int64_t HD = static_cast<int64_t>(H) * D, G = 1024;
  uint64_t seed = nan_guard ? 500 : 550;
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{300, 1}, {1, 7, 300}}) {
    const int64_t T = total_length(lens);
    Tensor qkv = random_tensor({T, 3 * HD}, DType::BF16, seed += 10);
    Tensor qkv_d = Tensor::empty({T + G, 3 * HD}, DType::BF16, Device::CUDA);
    Tensor head = qkv_d.rows(0, T), guard = qkv_d.rows(T, T + G);
    head.copy_from(qkv);
    if (nan_guard) {
      guard.poison();
    } else {
      guard.copy_from(random_tensor({G, 3 * HD}, DType::BF16, seed + 1, 100.0f));
    }
    Tensor out_big = Tensor::empty({T + G, HD}, DType::BF16, Device::CUDA);
    out_big.poison();
    Tensor out = out_big.rows(0, T);
    RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
    ErrorStats s = gpu_vs_cpu(q, k, v, qkv_d, qkv_d, lens, lens, H, D, 0.0883883f, &out);
    report(cat(nan_guard ? "NaN" : "finite", "-guarded self B=", lens.size(), " T=", T).c_str(), s);
    EXPECT_EQ(testing::count_poisoned(out_big.rows(T, T + G)), G * HD)
        << "cuDNN wrote rows past the last sequence";
  }
}

TEST(SdpaGpu, RowsPastTheLastSequenceGetNoWeight) {
  S3D_REQUIRE_GPU();
  guarded_self_attention(false);
}

TEST(SdpaGpu, RowsPastTheLastSequenceAreNotRead) {
  S3D_REQUIRE_GPU();
  guarded_self_attention(true);
}

// 30,227 tokens (and a mixed batch including them): the GPU runs everything, the test checks
// 64 sampled query rows against the fp64 loop (tests/attention_reference.h; the full CPU
// reference would take minutes).
void long_self_attention(const std::vector<int32_t>& lens, uint64_t seed) {
  const int H = 12, D = 128;
  const int64_t T = total_length(lens), HD = static_cast<int64_t>(H) * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor qkv = random_tensor({T, 3 * HD}, DType::BF16, seed);
  Tensor qkv_d = qkv.to(Device::CUDA);
  SeqLayout l = make_seq_layout(lens, Device::CUDA);
  Tensor out = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
  out.poison();
  sdpa_varlen(RowView{qkv_d, 0, T, HD, 3 * HD}, l, RowView{qkv_d, HD, T, HD, 3 * HD},
              RowView{qkv_d, 2 * HD, T, HD, 3 * HD}, l, H, D, scale, out);
  Tensor out_h = out.to(Device::CPU);
  EXPECT_EQ(testing::count_poisoned(out_h), 0);

  // First and last row of each sequence, the rest spread evenly over all tokens.
  std::vector<int64_t> sample;
  for (size_t b = 0; b < lens.size(); ++b) {
    sample.push_back(l.offsets[b]);
    sample.push_back(l.offsets[b + 1] - 1);
  }
  while (sample.size() < 64) sample.push_back(static_cast<int64_t>(sample.size()) * 7919 % T);

  const auto* x = qkv.data_as<uint16_t>();
  auto val = [&](int64_t row, int64_t col) {
    return static_cast<double>(bf16_to_float(x[row * 3 * HD + col]));
  };
  std::vector<double> want(sample.size() * HD);
  std::vector<float> got(sample.size() * HD);
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < static_cast<int64_t>(sample.size() * H); ++i) {
    const int64_t t = sample[i / H], h = i % H;
    const int64_t b =
        std::upper_bound(l.offsets.begin(), l.offsets.end(), t) - l.offsets.begin() - 1;
    const int64_t s0 = l.offsets[b];
    testing::fp64_attention_head(
        [&](int d) { return val(t, h * D + d); },
        [&](int64_t j, int d) { return val(s0 + j, HD + h * D + d); },
        [&](int64_t j, int d) { return val(s0 + j, 2 * HD + h * D + d); }, lens[b], D, scale,
        &want[(i / H) * HD + h * D]);
    for (int64_t d = 0; d < D; ++d)
      got[(i / H) * HD + h * D + d] = bf16_to_float(out_h.data_as<uint16_t>()[t * HD + h * D + d]);
  }
  report(cat("long self B=", lens.size(), " T=", T, " (64 sampled rows vs fp64)").c_str(),
         testing::compare(got, want));
}

TEST(SdpaGpu, LongSequenceAgainstSampledRows) {
  S3D_REQUIRE_GPU();
  long_self_attention({30227}, 600);
  long_self_attention({3664, 30227, 11833}, 601);
}

TEST(SdpaGpu, GraphIsReusedWithinABucket) {
  S3D_REQUIRE_GPU();
  // A scale no other test uses, so the first call must build a fresh graph.
  const int H = 2, D = 64;
  const float scale = 0.1234f;
  auto run = [&](const std::vector<int32_t>& lens, uint64_t seed) {
    const int64_t T = total_length(lens), HD = H * D;
    Tensor qkv = random_tensor({T, 3 * HD}, DType::BF16, seed);
    Tensor qkv_d = qkv.to(Device::CUDA);
    RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
    report(cat("bucket test T=", T).c_str(),
           gpu_vs_cpu(q, k, v, qkv_d, qkv_d, lens, lens, H, D, scale));
  };
  const int64_t before = attention::sdpa_graphs_built();
  run({100, 37}, 700);  // buckets: q and kv the smallest, 65,536
  EXPECT_EQ(attention::sdpa_graphs_built(), before + 1);
  run({120, 50}, 701);  // other token counts, same buckets: no new graph
  run({65, 128}, 702);
  run({2000, 3001}, 703);
  EXPECT_EQ(attention::sdpa_graphs_built(), before + 1);
  // Past the smallest bucket they double: 65,537 tokens build one more graph (the GPU alone:
  // a CPU reference at this length takes minutes; long sequences are checked above).
  const int64_t T = 65537, HD = H * D;
  Tensor qkv = random_tensor({T, 3 * HD}, DType::BF16, 704).to(Device::CUDA);
  SeqLayout l = make_seq_layout({static_cast<int32_t>(T)}, Device::CUDA);
  Tensor out = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
  sdpa_varlen(RowView{qkv, 0, T, HD, 3 * HD}, l, RowView{qkv, HD, T, HD, 3 * HD},
              RowView{qkv, 2 * HD, T, HD, 3 * HD}, l, H, D, scale, out);
  EXPECT_EQ(attention::sdpa_graphs_built(), before + 2);
  EXPECT_EQ(out.to(Device::CPU).first_non_finite(), -1);
}

TEST(SdpaGpu, RaggedOffsetsAreBuiltOncePerLayoutAndStride) {
  S3D_REQUIRE_GPU();
  const int H = 2, D = 64;
  const int64_t HD = H * D, T = 40;
  Tensor qkv = random_tensor({T, 3 * HD}, DType::BF16, 800).to(Device::CUDA);
  SeqLayout l = make_seq_layout({15, 25}, Device::CUDA);
  Tensor out = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
  RowView q{qkv, 0, T, HD, 3 * HD}, k{qkv, HD, T, HD, 3 * HD}, v{qkv, 2 * HD, T, HD, 3 * HD};
  const uint64_t before = launch_counts().by_op["ragged_offsets"];
  sdpa_varlen(q, l, k, v, l, H, D, 0.125f, out);
  EXPECT_EQ(launch_counts().by_op["ragged_offsets"], before + 2) << "strides 3HD and HD";
  sdpa_varlen(q, l, k, v, l, H, D, 0.125f, out);
  EXPECT_EQ(launch_counts().by_op["ragged_offsets"], before + 2) << "cached in the layout";
  EXPECT_EQ(l.ragged_offsets.at(3 * HD).to_floats(),
            (std::vector<float>{0, 15 * 3 * HD, 40 * 3 * HD}));
}

TEST(SdpaGpu, RejectsWhatCudnnCannotRun) {
  S3D_REQUIRE_GPU();
  const int H = 2, D = 64;
  const int64_t HD = H * D;
  Tensor qkv = random_tensor({10, 3 * HD}, DType::BF16, 900).to(Device::CUDA);
  Tensor out = Tensor::empty({10, HD}, DType::BF16, Device::CUDA);
  RowView q{qkv, 0, 10, HD, 3 * HD}, k{qkv, HD, 10, HD, 3 * HD}, v{qkv, 2 * HD, 10, HD, 3 * HD};
  SeqLayout ql = make_seq_layout({4, 0, 6}, Device::CUDA),
            kl = make_seq_layout({3, 3, 4}, Device::CUDA);
  EXPECT_NE(testing::error_of([&] {
              sdpa_varlen(q, ql, k, v, kl, H, D, 0.1f, out);
            }).find("query sequence 1 is empty"),
            std::string::npos);
  SeqLayout l = make_seq_layout({10}, Device::CUDA);
  RowView q4{qkv, 0, 10, 4 * 32, 3 * HD}, k4{qkv, HD, 10, 4 * 32, 3 * HD},
      v4{qkv, 2 * HD, 10, 4 * 32, 3 * HD};
  Tensor out4 = Tensor::empty({10, 4 * 32}, DType::BF16, Device::CUDA);
  EXPECT_NE(testing::error_of([&] {
              sdpa_varlen(q4, l, k4, v4, l, 32, 4, 0.1f, out4);
            }).find("multiple of 8"),
            std::string::npos);
  SeqLayout l_cpu = make_seq_layout({10}, Device::CPU);
  EXPECT_NE(testing::error_of([&] {
              sdpa_varlen(q, l_cpu, k, v, l_cpu, H, D, 0.1f, out);
            }).find("one device"),
            std::string::npos);
}

// Last in the file: prints what the first GPU run needs to know.
TEST(SdpaGpu, VersionsAndGraphCache) {
  S3D_REQUIRE_GPU();
  std::printf("[sdpa] cuDNN %s, %lld graphs built\n%s", attention::cudnn_version().c_str(),
              static_cast<long long>(attention::sdpa_graphs_built()),
              attention::detail::cudnn_sdpa_cache_summary().c_str());
  EXPECT_NE(attention::cudnn_version(), "none");
}

}  // namespace
}  // namespace s3d
