// Device helpers shared by the reference-path CUDA kernels: bf16 <-> fp32 element access
// (bf16 travels as its raw uint16_t bits, converted with core/bf16.h exactly as the CPU
// oracle converts), 16-byte chunk loads, a deterministic block reduction, dtype dispatch,
// the range check of a row index read on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "core/bf16.h"
#include "core/tensor.h"
#include "kernels/kernel_checks.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(uint16_t v) { return bf16_to_float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ uint16_t from_float<uint16_t>(float v) { return float_to_bf16(v); }

// Eight consecutive elements: one 16-byte access for bf16, two for f32. The pointer must be
// 16-byte aligned (launchers check with aligned16 and fall back to scalar code).
inline constexpr int kChunk = 8;

__device__ __forceinline__ void load_chunk(const uint16_t* p, float (&v)[kChunk]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = bf16_to_float(static_cast<uint16_t>(w[k] & 0xffffu));
    v[2 * k + 1] = bf16_to_float(static_cast<uint16_t>(w[k] >> 16));
  }
}

__device__ __forceinline__ void load_chunk(const float* p, float (&v)[kChunk]) {
  float4 lo = reinterpret_cast<const float4*>(p)[0];
  float4 hi = reinterpret_cast<const float4*>(p)[1];
  v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
  v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
}

__device__ __forceinline__ void store_chunk(uint16_t* p, const float (&v)[kChunk]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w[k] = static_cast<uint32_t>(float_to_bf16(v[2 * k])) |
           (static_cast<uint32_t>(float_to_bf16(v[2 * k + 1])) << 16);
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void store_chunk(float* p, const float (&v)[kChunk]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// RoPE on one 8-element chunk in place: its 4 (even, odd) pairs rotated by the cos c and sin s
// of each pair (math::rope_rotate, the reference's product), for the in-place q/k kernels
// (qk_rmsnorm.cu) and their tolerance twins (fast_norm.cu).
__device__ __forceinline__ void rope_rotate_chunk(float (&v)[kChunk], const float4& c,
                                                  const float4& s) {
  const float cv[4] = {c.x, c.y, c.z, c.w}, sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    float re, im;
    math::rope_rotate(v[2 * p], v[2 * p + 1], cv[p], sv[p], re, im);
    v[2 * p] = re;
    v[2 * p + 1] = im;
  }
}

using detail::aligned16;

// `value`, entry `row` of the index array `name` (a token's batch_index, the source of a
// gathered row), when it lies in [0, range). Never clamp: a row of the wrong asset would be
// silently wrong. The model validates batch indices once per request, so a value outside is
// a bug: the threads where `print` holds print "op: name[row] = value is outside [0, range)"
// (most kernels pick one thread per row, so the line is not repeated) and every thread that
// read it traps, which kills the CUDA context. The trap can end the context before the printf
// buffer reaches the host, so the line may not show; compute-sanitizer names the kernel,
// block and thread of the trap either way.
__device__ __forceinline__ int64_t checked_index(int64_t value, int64_t row, int64_t range,
                                                 const char* op, const char* name, bool print) {
  if (value < 0 || value >= range) {
    if (print)
      printf("%s: %s[%lld] = %lld is outside [0, %lld)\n", op, name, static_cast<long long>(row),
             static_cast<long long>(value), static_cast<long long>(range));
    __trap();
  }
  return value;
}

// Sum over the block, in a fixed order (so repeated runs agree bitwise); the result is
// returned to every thread. blockDim.x must be a multiple of 32 and every thread must call.
// `scratch` is __shared__ double[33].
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ double block_sum(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    double w = lane < warps ? scratch[lane] : 0.0;
    w = warp_sum(w);
    if (lane == 0) scratch[32] = w;
  }
  __syncthreads();
  double total = scratch[32];
  __syncthreads();  // scratch may be reused by the caller's next reduction
  return total;
}

// Calls f with a value of the C++ type that stores `dtype` (uint16_t for bf16, float for
// f32); the op validated the dtype already.
template <class F>
void dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::BF16) {
    f(uint16_t{});
  } else {
    f(float{});
  }
}

}  // namespace s3d::kernels::cuda
