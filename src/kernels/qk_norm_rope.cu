// Per-head RMSNorm and RoPE kernels. The arithmetic is reference_math.h's, shared with the
// CPU oracle; only the memory layout and the order of the fp64 sum of squares differ.
#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/qk_norm_rope_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One warp per (token, head): sum of squares of the D values (double, butterfly order),
// norm = sqrtf(sum), then y = x / max(norm, 1e-12) * gamma * scale. The second pass re-reads
// the head's D values from L1. kVec: 4 bf16 (8 bytes) per lane and step, when D % 4 == 0
// and the view's pointer, offset and stride keep every head 8-byte aligned.
template <bool kVec>
__global__ void head_rmsnorm_kernel(const uint16_t* x, int64_t stride, int64_t tokens, int H,
                                    int D, const float* gamma, float scale, uint16_t* out) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= tokens * H) return;  // whole warps leave together
  const int64_t t = item / H;
  const int h = static_cast<int>(item % H);
  const uint16_t* in = x + t * stride + static_cast<int64_t>(h) * D;
  const float* g = gamma + static_cast<int64_t>(h) * D;
  uint16_t* o = out + item * D;
  constexpr int kStep = kVec ? 4 : 1;

  double sum_sq = 0.0;
  for (int d = lane * kStep; d < D; d += 32 * kStep) {
    if constexpr (kVec) {
      const uint2 raw = *reinterpret_cast<const uint2*>(in + d);
      const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const double lo = bf16_to_float(static_cast<uint16_t>(w[k] & 0xffffu));
        const double hi = bf16_to_float(static_cast<uint16_t>(w[k] >> 16));
        sum_sq += lo * lo;
        sum_sq += hi * hi;
      }
    } else {
      const double v = bf16_to_float(in[d]);
      sum_sq += v * v;
    }
  }
  const float norm = math::l2_norm_from_squares(warp_sum(sum_sq));

  for (int d = lane * kStep; d < D; d += 32 * kStep) {
    if constexpr (kVec) {
      const uint2 raw = *reinterpret_cast<const uint2*>(in + d);
      const uint32_t w[2] = {raw.x, raw.y};
      uint32_t r[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float lo = bf16_to_float(static_cast<uint16_t>(w[k] & 0xffffu));
        const float hi = bf16_to_float(static_cast<uint16_t>(w[k] >> 16));
        const uint16_t ylo = float_to_bf16(math::head_rmsnorm_apply(lo, norm, g[d + 2 * k], scale));
        const uint16_t yhi =
            float_to_bf16(math::head_rmsnorm_apply(hi, norm, g[d + 2 * k + 1], scale));
        r[k] = static_cast<uint32_t>(ylo) | (static_cast<uint32_t>(yhi) << 16);
      }
      *reinterpret_cast<uint2*>(o + d) = make_uint2(r[0], r[1]);
    } else {
      o[d] = float_to_bf16(math::head_rmsnorm_apply(bf16_to_float(in[d]), norm, g[d], scale));
    }
  }
}

// One thread per (token, phase p): cos and sin of coord[p / fd] * omega[p % fd], or of 0
// for the padding phases p >= 3 * fd.
__global__ void rope_phases_kernel(const int32_t* coords, int64_t tokens, int half,
                                   math::FreqTable freqs, float* cos_out, float* sin_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * half) return;
  const int64_t t = i / half;
  const int p = static_cast<int>(i % half);
  const int fd = freqs.count;
  const float phase =
      p < 3 * fd ? math::rope_phase(coords[t * 4 + 1 + p / fd], freqs.value[p % fd]) : 0.0f;
  cos_out[i] = cosf(phase);
  sin_out[i] = sinf(phase);
}

// Rotates pairs (x[2p], x[2p+1]) of every head by phase p of the token. kVec: one thread per
// 8 elements (4 pairs; 16-byte x/out and float4 cos/sin accesses), when D % 8 == 0 and the
// pointers are 16-byte aligned; otherwise one thread per pair.
template <bool kVec>
__global__ void rope_apply_kernel(const uint16_t* x, const float* cos, const float* sin,
                                  uint16_t* out, int64_t n, int64_t row, int D) {
  constexpr int kStep = kVec ? kChunk : 2;
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kStep;
  if (i0 >= n) return;
  const int64_t t = i0 / row;
  const int half = D / 2;
  const int64_t p0 = (i0 % row) % D / 2;
  const float* c = cos + t * half + p0;
  const float* s = sin + t * half + p0;
  if constexpr (kVec) {
    float v[kChunk];
    load_chunk(x + i0, v);
    const float4 c4 = *reinterpret_cast<const float4*>(c);
    const float4 s4 = *reinterpret_cast<const float4*>(s);
    const float cv[4] = {c4.x, c4.y, c4.z, c4.w}, sv[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) math::rope_rotate(v[2 * k], v[2 * k + 1], cv[k], sv[k], v[2 * k], v[2 * k + 1]);
    store_chunk(out + i0, v);
  } else {
    float re, im;
    math::rope_rotate(bf16_to_float(x[i0]), bf16_to_float(x[i0 + 1]), c[0], s[0], re, im);
    out[i0] = float_to_bf16(re);
    out[i0 + 1] = float_to_bf16(im);
  }
}

}  // namespace

void head_rmsnorm(const RowView& x, const Tensor& gamma, int heads, int head_dim, float scale,
                  Tensor& out) {
  const auto* xp = static_cast<const uint16_t*>(x.data());
  const bool vec = head_dim % 4 == 0 && x.stride % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(xp) % 8 == 0 && aligned16(out.data());
  const int64_t threads_total = x.rows * heads * 32;
  auto kernel = vec ? head_rmsnorm_kernel<true> : head_rmsnorm_kernel<false>;
  kernel<<<grid_for(threads_total, kThreads), kThreads, 0, current_stream()>>>(
      xp, x.stride, x.rows, heads, head_dim, gamma.data_as<float>(), scale,
      out.data_as<uint16_t>());
  after_launch("head_rmsnorm");
}

void rope_phases(const Tensor& coords, int half, const math::FreqTable& freqs, Tensor& cos_out,
                 Tensor& sin_out) {
  const int64_t T = coords.size(0);
  rope_phases_kernel<<<grid_for(T * half, kThreads), kThreads, 0, current_stream()>>>(
      coords.data_as<int32_t>(), T, half, freqs, cos_out.data_as<float>(),
      sin_out.data_as<float>());
  after_launch("rope_phases");
}

void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out) {
  const int D = static_cast<int>(x.size(2));
  const int64_t n = x.numel(), row = x.size(1) * D;
  const bool vec = D % kChunk == 0 && aligned16(x.data()) && aligned16(out.data()) &&
                   aligned16(cos.data()) && aligned16(sin.data());
  if (vec) {
    rope_apply_kernel<true><<<grid_for(n / kChunk, kThreads), kThreads, 0, current_stream()>>>(
        x.data_as<uint16_t>(), cos.data_as<float>(), sin.data_as<float>(),
        out.data_as<uint16_t>(), n, row, D);
  } else {
    rope_apply_kernel<false><<<grid_for(n / 2, kThreads), kThreads, 0, current_stream()>>>(
        x.data_as<uint16_t>(), cos.data_as<float>(), sin.data_as<float>(),
        out.data_as<uint16_t>(), n, row, D);
  }
  after_launch("rope_apply");
}

}  // namespace s3d::kernels::cuda
