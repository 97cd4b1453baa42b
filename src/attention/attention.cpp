// attention: sequence layouts, validation at the boundary, the CPU reference, and the GPU
// dispatch into cuDNN (attention_cudnn.cpp, through the plain structs of cudnn_sdpa.h).
#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attention/cudnn_sdpa.h"
#include "core/profiler.h"
#include "core/bf16.h"
#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d::attention {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The smallest sequence-length bucket: every length up to it shares one cuDNN graph (per
// batch, strides and scale), so that a token count the engine has not met builds no graph.
// A graph build costs 40-70 ms on the H200 (three per new power of two: 0.12-0.2 s, a third
// of a 3,664-token request); the padding mask makes the rows past a sequence's length cost
// next to nothing (+2% at 3,664 tokens, nothing measurable from 9,360 up; 2026-12-01,
// first-request-call1 and -call2 in bench/results/2026-12-01-h200-evidence/raw.tar.xz).
// Beyond 65,536 the buckets double, where one build is under 1% of a request. SPARSE3D_SDPA_MIN_BUCKET (a power of two >= 64) sets
// another minimum, read once: 64 gives a graph per power of two, as before 0.4.
constexpr int64_t kDefaultMinBucket = 65536;

int64_t min_bucket() {
  static const int64_t value = [] {
    const char* env = std::getenv("SPARSE3D_SDPA_MIN_BUCKET");
    if (env == nullptr || *env == '\0') return kDefaultMinBucket;
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    S3D_CHECK(end && *end == '\0' && v >= 64 && v <= (int64_t{1} << 30) && (v & (v - 1)) == 0,
              "SPARSE3D_SDPA_MIN_BUCKET is '", env, "'; expected a power of two in [64, 2^30]");
    return static_cast<int64_t>(v);
  }();
  return value;
}

// One graph serves every length up to its bucket: min_bucket(), then powers of two.
int64_t length_bucket(int64_t max_len) {
  int64_t b = min_bucket();
  while (b < max_len) b *= 2;
  return b;
}

void check_view(const RowView& view, const char* what, int64_t rows, int64_t cols) {
  S3D_CHECK(view.base.defined(), what, ": the row view has no tensor");
  S3D_CHECK(view.dtype() == DType::BF16, what, ": expected bf16 rows, got ", view.base.describe());
  S3D_CHECK(view.rows == rows && view.cols == cols, what, ": expected ", rows, " rows of ", cols,
            " (layout total x heads*head_dim), got ", view.rows, " rows of ", view.cols);
  view.check_bounds(what);
}

void check_layout(const SeqLayout& l, const char* what) {
  S3D_CHECK(l.batch() >= 1 && l.offsets.size() == l.lengths.size() + 1 && l.cu_seqlens.defined() &&
                l.seq_lens.defined(),
            what, ": not a layout from make_seq_layout (", l.batch(), " lengths, ",
            l.offsets.size(), " offsets)");
}

// Ragged offsets for one token stride, built on the device once per layout and stride.
const Tensor& ragged_offsets(const SeqLayout& l, int64_t stride) {
  auto it = l.ragged_offsets.find(stride);
  if (it != l.ragged_offsets.end()) return it->second;
  Tensor t = Tensor::empty({l.batch() + 1}, DType::I32, Device::CUDA);
  detail::launch_ragged_offsets(l.cu_seqlens.data_as<int32_t>(), l.batch() + 1,
                                static_cast<int32_t>(stride), t.data_as<int32_t>(),
                                current_stream());
  return l.ragged_offsets.emplace(stride, t).first->second;
}

void sdpa_cpu(const RowView& q, const SeqLayout& q_layout, const RowView& k, const RowView& v,
              const SeqLayout& kv_layout, int heads, int head_dim, float scale, Tensor& out) {
  const int64_t T = q_layout.total(), H = heads, D = head_dim;
  std::vector<int32_t> seq_of_row(static_cast<size_t>(T));
  for (int b = 0; b < q_layout.batch(); ++b)
    std::fill(seq_of_row.begin() + q_layout.offsets[b],
              seq_of_row.begin() + q_layout.offsets[b + 1], b);
  const auto* qp = static_cast<const uint16_t*>(q.data());
  const auto* kp = static_cast<const uint16_t*>(k.data());
  const auto* vp = static_cast<const uint16_t*>(v.data());
  auto* op = out.data_as<uint16_t>();

  const bool parallel = T * H * kv_layout.max_len * D > (int64_t{1} << 18);
#pragma omp parallel if (parallel)
  {
    std::vector<float> p(static_cast<size_t>(kv_layout.max_len)), qf(D), acc(D);
#pragma omp for schedule(dynamic, 8)
    for (int64_t item = 0; item < T * H; ++item) {
      const int64_t t = item / H, h = item % H;
      const int b = seq_of_row[static_cast<size_t>(t)];
      const int64_t kv0 = kv_layout.offsets[b], n = kv_layout.lengths[b];
      for (int64_t d = 0; d < D; ++d) qf[d] = bf16_to_float(qp[t * q.stride + h * D + d]);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* kr = kp + (kv0 + j) * k.stride + h * D;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t d = 0; d < D; ++d) s += qf[d] * bf16_to_float(kr[d]);
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* vr = vp + (kv0 + j) * v.stride + h * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * bf16_to_float(vr[d]);
      }
      for (int64_t d = 0; d < D; ++d) op[t * H * D + h * D + d] = float_to_bf16(acc[d] / sum);
    }
  }
}

void sdpa_cuda(const RowView& q, const SeqLayout& q_layout, const RowView& k, const RowView& v,
               const SeqLayout& kv_layout, int heads, int head_dim, float scale, Tensor& out,
               const Config& config) {
  for (int b = 0; b < q_layout.batch(); ++b)
    S3D_CHECK(q_layout.lengths[b] > 0, "sdpa_varlen: query sequence ", b,
              " is empty; the cuDNN path needs at least one query per sequence (drop the empty "
              "sequence from the request)");
  S3D_CHECK(head_dim % 8 == 0, "sdpa_varlen: head_dim ", head_dim,
            " is not a multiple of 8, which cuDNN SDPA requires");
  const int64_t hd = static_cast<int64_t>(heads) * head_dim;
  struct Operand {
    const char* name;
    int64_t stride;
    const void* ptr;
    int64_t total;
  };
  for (const Operand& o : {Operand{"q", q.stride, q.data(), q_layout.total()},
                           Operand{"k", k.stride, k.data(), kv_layout.total()},
                           Operand{"v", v.stride, v.data(), kv_layout.total()},
                           Operand{"out", hd, out.data(), q_layout.total()}}) {
    S3D_CHECK(o.stride % 8 == 0 && reinterpret_cast<uintptr_t>(o.ptr) % 16 == 0,
              "sdpa_varlen: ", o.name,
              " rows must start 16-byte aligned with a stride that is a multiple of 8 "
              "elements (cuDNN loads 16 bytes at a time); got stride ",
              o.stride, " at address ", o.ptr);
    S3D_CHECK(o.total * o.stride <= kInt32Max, "sdpa_varlen: ", o.name, " spans ", o.total,
              " tokens x stride ", o.stride, " = ", o.total * o.stride,
              " elements, beyond the int32 ragged offsets cuDNN reads");
  }

  detail::SdpaShape shape;
  shape.batch = q_layout.batch();
  shape.heads = heads;
  shape.head_dim = head_dim;
  shape.s_q_bucket = length_bucket(q_layout.max_len);
  shape.s_kv_bucket = length_bucket(kv_layout.max_len);
  shape.q_stride = q.stride;
  shape.k_stride = k.stride;
  shape.v_stride = v.stride;
  shape.scale = scale;
  shape.implementation = static_cast<int>(config.implementation);

  detail::SdpaPointers ptrs;
  ptrs.q = q.data();
  ptrs.k = k.data();
  ptrs.v = v.data();
  ptrs.o = out.data();
  ptrs.seq_len_q = q_layout.seq_lens.data_as<int32_t>();
  ptrs.seq_len_kv = kv_layout.seq_lens.data_as<int32_t>();
  ptrs.ragged_q = ragged_offsets(q_layout, q.stride).data_as<int32_t>();
  ptrs.ragged_k = ragged_offsets(kv_layout, k.stride).data_as<int32_t>();
  ptrs.ragged_v = ragged_offsets(kv_layout, v.stride).data_as<int32_t>();
  ptrs.ragged_o = ragged_offsets(q_layout, hd).data_as<int32_t>();
  before_library_write(out.data(), static_cast<size_t>(q_layout.total() * hd) * 2);
  detail::cudnn_sdpa_forward(shape, ptrs, current_stream(), config.search);
}

}  // namespace

SeqLayout make_seq_layout(const std::vector<int32_t>& lengths, Device device) {
  S3D_CHECK(!lengths.empty(), "make_seq_layout: no sequences (a request needs at least one)");
  SeqLayout l;
  l.lengths = lengths;
  l.device = device;
  l.offsets.assign(lengths.size() + 1, 0);
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) {
    S3D_CHECK(lengths[i] >= 0, "make_seq_layout: sequence ", i, " has negative length ",
              lengths[i]);
    l.offsets[i + 1] = l.offsets[i] + lengths[i];
    S3D_CHECK(l.offsets[i + 1] <= kInt32Max, "make_seq_layout: the first ", i + 1,
              " sequences already hold ", l.offsets[i + 1],
              " tokens, more than int32 offsets allow");
    cu[i + 1] = static_cast<int32_t>(l.offsets[i + 1]);
    l.max_len = std::max(l.max_len, lengths[i]);
  }
  const auto B = static_cast<int64_t>(lengths.size());
  l.cu_seqlens = Tensor::from_ints(cu, {B + 1});
  l.seq_lens = Tensor::from_ints(lengths, {B});
  if (device == Device::CUDA) {
    l.cu_seqlens = l.cu_seqlens.to(Device::CUDA);
    l.seq_lens = l.seq_lens.to(Device::CUDA);
  }
  return l;
}

const char* implementation_name(Implementation i) {
  switch (i) {
    case Implementation::Unified: return "unified";
    case Implementation::Composite: return "composite";
    case Implementation::Auto: break;
  }
  return "auto";
}

void sdpa_varlen(const RowView& q, const SeqLayout& q_layout, const RowView& k, const RowView& v,
                 const SeqLayout& kv_layout, int heads, int head_dim, float scale, Tensor& out,
                 const Config& config) {
  check_layout(q_layout, "sdpa_varlen: q_layout");
  check_layout(kv_layout, "sdpa_varlen: kv_layout");
  S3D_CHECK(q_layout.batch() == kv_layout.batch(), "sdpa_varlen: q_layout has ", q_layout.batch(),
            " sequences but kv_layout has ", kv_layout.batch());
  S3D_CHECK(heads > 0 && head_dim > 0, "sdpa_varlen: heads (", heads, ") and head_dim (", head_dim,
            ") must be positive");
  const int64_t hd = static_cast<int64_t>(heads) * head_dim;
  check_view(q, "sdpa_varlen: q", q_layout.total(), hd);
  check_view(k, "sdpa_varlen: k", kv_layout.total(), hd);
  check_view(v, "sdpa_varlen: v", kv_layout.total(), hd);
  check_tensor(out, "sdpa_varlen: out", DType::BF16, {q_layout.total(), hd});
  const Device dev = out.device();
  S3D_CHECK(q.device() == dev && k.device() == dev && v.device() == dev && q_layout.device == dev &&
                kv_layout.device == dev,
            "sdpa_varlen: q, k, v, out and both layouts must be on one device (out is on ",
            device_name(dev), ")");
  for (int b = 0; b < kv_layout.batch(); ++b)
    S3D_CHECK(kv_layout.lengths[b] > 0, "sdpa_varlen: sequence ", b,
              " has no keys; softmax over an empty set is undefined");
  if (q_layout.total() == 0) return;

  if (dev == Device::CUDA) {
    // QK^T and PV: 2 * 2 * D FLOPs per (query, key) pair and head.
    double pairs = 0;
    for (int b = 0; b < q_layout.batch(); ++b)
      pairs += static_cast<double>(q_layout.lengths[b]) * kv_layout.lengths[b];
    profiler::LibraryScope scope("attention", 4.0 * pairs * heads * head_dim);
    sdpa_cuda(q, q_layout, k, v, kv_layout, heads, head_dim, scale, out, config);
  } else {
    sdpa_cpu(q, q_layout, k, v, kv_layout, heads, head_dim, scale, out);
  }
}

std::string cudnn_version() {
  if (!cuda_available()) return "none";
  const size_t v = detail::cudnn_backend_version();  // major * 10000 + minor * 100 + patch
  return cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

int64_t sdpa_graphs_built() { return detail::cudnn_sdpa_graphs_built(); }

void release_resources() { detail::release_cudnn_sdpa(); }

size_t release_workspaces() { return detail::release_cudnn_sdpa_workspaces(); }

}  // namespace s3d::attention
