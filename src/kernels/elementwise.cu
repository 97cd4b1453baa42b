// CUDA kernels of the elementwise ops. The maps run through elementwise_kernels.cuh; the
// arithmetic is reference_math.h's, shared with the CPU oracle.
#include <algorithm>

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/elementwise_cuda.h"
#include "kernels/elementwise_kernels.cuh"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Identity {
  __device__ float operator()(float x) const { return x; }
};
struct Silu {
  __device__ float operator()(float x) const { return math::silu(x); }
};
struct GeluTanh {
  __device__ float operator()(float x) const { return math::gelu_tanh(x); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

// out[r, c] = x[r * stride + c] + s; few rows (a [B, C] chunk of the modulation), so one
// thread per element is plenty.
template <class Tx, class To>
__global__ void add_scalar_kernel(const Tx* x, int64_t stride, int64_t rows, int64_t cols,
                                  float s, To* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = from_float<To>(to_float(x[r * stride + c]) + s);
}

// dst row r = src row (index ? index[r] : r), copied as raw words (16-byte words when the
// rows allow it, else one element per word). One block per row; strides are in words.
template <class Word>
__global__ void copy_rows_kernel(const Word* src, int64_t src_stride, int64_t src_rows,
                                 const int32_t* index, Word* dst, int64_t dst_stride,
                                 int64_t words_per_row) {
  const int64_t r = blockIdx.x;
  int64_t s = r;
  if (index != nullptr)
    s = checked_index(index[r], r, src_rows, "gather_rows", "index", threadIdx.x == 0);
  const Word* from = src + s * src_stride;
  Word* to = dst + r * dst_stride;
  for (int64_t w = threadIdx.x; w < words_per_row; w += blockDim.x) to[w] = from[w];
}

template <class Word>
void launch_copy_rows(const void* src, int64_t src_stride, int64_t src_rows,
                      const int32_t* index, void* dst, int64_t dst_stride, int64_t rows,
                      int64_t words_per_row, const char* name) {
  S3D_CHECK(rows < (int64_t{1} << 31), name, ": ", rows, " rows exceed the grid limit");
  const int threads = static_cast<int>(std::min<int64_t>(256, (words_per_row + 31) / 32 * 32));
  copy_rows_kernel<Word><<<static_cast<unsigned>(rows), threads, 0, current_stream()>>>(
      static_cast<const Word*>(src), src_stride, src_rows, index, static_cast<Word*>(dst),
      dst_stride, words_per_row);
  after_launch(name);
}

// Picks 16-byte words when pointers, strides and row length allow, else element words.
void copy_rows_any(const RowView& src, const int32_t* index, void* dst, int64_t dst_stride,
                   int64_t rows, const char* name) {
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  const int64_t per_word = 16 / es;
  const bool wide = aligned16(src.data()) && aligned16(dst) && src.stride % per_word == 0 &&
                    dst_stride % per_word == 0 && src.cols % per_word == 0;
  if (wide) {
    launch_copy_rows<uint4>(src.data(), src.stride / per_word, src.rows, index, dst,
                            dst_stride / per_word, rows, src.cols / per_word, name);
  } else if (es == 2) {
    launch_copy_rows<uint16_t>(src.data(), src.stride, src.rows, index, dst, dst_stride, rows,
                               src.cols, name);
  } else {
    launch_copy_rows<uint32_t>(src.data(), src.stride, src.rows, index, dst, dst_stride, rows,
                               src.cols, name);
  }
}

}  // namespace

void cast(const Tensor& x, Tensor& out) { launch_unary(x, out, Identity{}, "cast"); }

void add(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out) {
  launch_binary(a, b, b_period, out, Add{}, "add");
}

void mul(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out) {
  launch_binary(a, b, b_period, out, Mul{}, "mul");
}

void add_scalar(const RowView& x, float s, Tensor& out) {
  const int64_t n = x.rows * x.cols;
  dispatch_float(x.dtype(), [&](auto tx) {
    dispatch_float(out.dtype(), [&](auto to) {
      using Tx = decltype(tx);
      using To = decltype(to);
      add_scalar_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
          static_cast<const Tx*>(x.data()), x.stride, x.rows, x.cols, s, out.data_as<To>());
      after_launch("add_scalar");
    });
  });
}

void gather_rows(const RowView& src, const Tensor& index, Tensor& out) {
  copy_rows_any(src, index.data_as<int32_t>(), out.data(), src.cols, index.numel(),
                "gather_rows");
}

void copy_rows(const RowView& src, RowView& dst) {
  copy_rows_any(src, nullptr, dst.mutable_data(), dst.stride, src.rows, "copy_rows");
}

// The copy kernel with a source stride of 0: every destination row reads the one row.
void broadcast_row(const Tensor& row, Tensor& out) {
  const int64_t cols = row.numel();
  copy_rows_any(RowView{row, 0, 1, cols, 0}, nullptr, out.data(), cols, out.numel() / cols,
                "broadcast_row");
}

void silu(const Tensor& x, Tensor& out) { launch_unary(x, out, Silu{}, "silu"); }

void gelu_tanh(const Tensor& x, Tensor& out) { launch_unary(x, out, GeluTanh{}, "gelu_tanh"); }

}  // namespace s3d::kernels::cuda
