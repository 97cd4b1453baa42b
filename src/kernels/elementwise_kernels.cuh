// Elementwise map kernels shared by the elementwise and sampler ops: out[i] = op(x[i]) and
// out[i] = op(a[i], b[j]). Each thread owns a chunk of 8 consecutive elements: 16-byte
// accesses when every operand is 16-byte aligned (the common case: allocator pointers and
// widths that are multiples of 8), a scalar loop otherwise and for the tail.
#pragma once

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"

namespace s3d::kernels::cuda {

inline constexpr int kMapThreads = 256;

// out[i] = op(x[i])
template <class Tx, class To, class Op>
__global__ void unary_kernel(const Tx* x, To* out, int64_t n, bool vec, Op op) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (i0 >= n) return;
  if (vec && i0 + kChunk <= n) {
    float v[kChunk];
    load_chunk(x + i0, v);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) v[k] = op(v[k]);
    store_chunk(out + i0, v);
    return;
  }
  for (int64_t i = i0; i < n && i < i0 + kChunk; ++i) out[i] = from_float<To>(op(to_float(x[i])));
}

// out[i] = op(a[i], b[j]), j = i, or i % b_period when b is one broadcast row. The vector
// path needs b_period % 8 == 0 so that a chunk never wraps around the row.
template <class Ta, class Tb, class To, class Op>
__global__ void binary_kernel(const Ta* a, const Tb* b, int64_t b_period, To* out, int64_t n,
                              bool vec, Op op) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (i0 >= n) return;
  if (vec && i0 + kChunk <= n) {
    float va[kChunk], vb[kChunk];
    load_chunk(a + i0, va);
    load_chunk(b + (b_period == 0 ? i0 : i0 % b_period), vb);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) va[k] = op(va[k], vb[k]);
    store_chunk(out + i0, va);
    return;
  }
  for (int64_t i = i0; i < n && i < i0 + kChunk; ++i) {
    const int64_t j = b_period == 0 ? i : i % b_period;
    out[i] = from_float<To>(op(to_float(a[i]), to_float(b[j])));
  }
}

template <class Op>
void launch_unary(const Tensor& x, Tensor& out, Op op, const char* name) {
  const int64_t n = x.numel();
  const bool vec = aligned16(x.data()) && aligned16(out.data());
  dispatch_float(x.dtype(), [&](auto tx) {
    dispatch_float(out.dtype(), [&](auto to) {
      using Tx = decltype(tx);
      using To = decltype(to);
      unary_kernel<<<grid_for((n + kChunk - 1) / kChunk, kMapThreads), kMapThreads, 0,
                     current_stream()>>>(x.data_as<Tx>(), out.data_as<To>(), n, vec, op);
      after_launch(name);
    });
  });
}

template <class Op>
void launch_binary(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out, Op op,
                   const char* name) {
  const int64_t n = a.numel();
  const bool vec = aligned16(a.data()) && aligned16(b.data()) && aligned16(out.data()) &&
                   b_period % kChunk == 0;
  dispatch_float(a.dtype(), [&](auto ta) {
    dispatch_float(b.dtype(), [&](auto tb) {
      dispatch_float(out.dtype(), [&](auto to) {
        using Ta = decltype(ta);
        using Tb = decltype(tb);
        using To = decltype(to);
        binary_kernel<<<grid_for((n + kChunk - 1) / kChunk, kMapThreads), kMapThreads, 0,
                        current_stream()>>>(a.data_as<Ta>(), b.data_as<Tb>(), b_period,
                                            out.data_as<To>(), n, vec, op);
        after_launch(name);
      });
    });
  });
}

}  // namespace s3d::kernels::cuda
