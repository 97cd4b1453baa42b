// Fused q/k RMSNorm + RoPE, in place. One group of 16 lanes per (token, slot, head); lane j
// of a group owns the 16-byte chunks at elements 8j + 128k of the head (k = 0, 1, ...: one
// chunk for D = 128, so the head is read once, normalised and rotated in registers, and
// written back once). Two heads per warp, 16 per 256-thread block.
//
// Rounding points (those of the reference chain, per element):
//   y   = bf16(x / max(norm, 1e-12) * gamma * sqrt(D))      [head_rmsnorm's store]
//   out = bf16(rotate(y[2p], y[2p+1], cos, sin))             [rope_apply's store]
// norm = sqrtf(float(sum of squares in double)). The sum is formed in the order of
// head_rmsnorm_kernel<true> (qk_norm_rope.cu), so the bits are that kernel's: there, lane l
// of a warp adds the squares of elements 4l..4l+3 (+128k) in order and the warp reduces by a
// butterfly over xor 16, 8, 4, 2, 1. Here lane j keeps two partial sums, a for 8j..8j+3
// (the reference's lane 2j) and b for 8j+4..8j+7 (lane 2j+1); the reference's xor 16/8/4/2
// are xor 8/4/2/1 between groups' lanes, applied to a and b alike, and its xor 1 is a + b.
#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/qk_rmsnorm_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 16;             // lanes per head
constexpr int kSpan = kGroup * kChunk;  // 128 elements per pass of a group

// The head's L2 norm over the group's lanes (lane j holds chunk v0 at d0 = 8j when have0, and
// reads the chunks at d0 + 128k itself), in the reference kernel's summation order (above).
__device__ __forceinline__ float group_l2_norm(const uint16_t* head, const float (&v0)[kChunk],
                                               bool have0, int d0, int D, unsigned mask) {
  double a = 0.0, b = 0.0;
  auto add_squares = [&](const float(&v)[kChunk]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) a += static_cast<double>(v[k]) * v[k];
#pragma unroll
    for (int k = 4; k < 8; ++k) b += static_cast<double>(v[k]) * v[k];
  };
  if (have0) add_squares(v0);
  for (int d = d0 + kSpan; d < D; d += kSpan) {
    float v[kChunk];
    load_chunk(head + d, v);
    add_squares(v);
  }
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) {
    a += __shfl_xor_sync(mask, a, offset);
    b += __shfl_xor_sync(mask, b, offset);
  }
  return math::l2_norm_from_squares(a + b);
}

// Chunk d of the head (values v, read before): normalised (kNorm: by norm, with the gammas g),
// rotated (kRope: by the token's cos/sin c, sn) and written back, rounded to bf16.
template <bool kNorm, bool kRope>
__device__ __forceinline__ void finish_chunk(uint16_t* head, float (&v)[kChunk], int d, float norm,
                                             const float* g, float scale, const float* c,
                                             const float* sn) {
  if constexpr (kNorm) {
    float gv[kChunk];
    load_chunk(g + d, gv);
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      v[k] = round_bf16(math::head_rmsnorm_apply(v[k], norm, gv[k], scale));
  }
  if constexpr (kRope) {
    rope_rotate_chunk(v, *reinterpret_cast<const float4*>(c + d / 2),
                      *reinterpret_cast<const float4*>(sn + d / 2));
  }
  store_chunk(head + d, v);  // rounds each value to bf16
}

template <bool kNorm, bool kRope>
__global__ void __launch_bounds__(kThreads)
qk_inplace_kernel(uint16_t* x, int64_t stride, int64_t tokens, int slots, int H, int D,
                  const float* gamma0, const float* gamma1, float scale, const float* cos,
                  const float* sin) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kGroup;
  const int lane = threadIdx.x % 32;
  const int j = lane % kGroup;
  // Shuffles stay inside the group's half-warp, so a half-warp past the end may leave.
  const unsigned mask = 0xffffu << (lane & 16);
  const int64_t heads_per_token = static_cast<int64_t>(slots) * H;
  if (item >= tokens * heads_per_token) return;
  const int64_t t = item / heads_per_token;
  const int sh = static_cast<int>(item % heads_per_token);  // s * H + h
  const int s = sh / H, h = sh % H;
  uint16_t* head = x + t * stride + static_cast<int64_t>(sh) * D;
  const float* g = nullptr;
  if constexpr (kNorm) g = (s == 0 ? gamma0 : gamma1) + static_cast<int64_t>(h) * D;
  const int64_t half = D / 2;
  const float* c = nullptr;
  const float* sn = nullptr;
  if constexpr (kRope) {
    c = cos + t * half;
    sn = sin + t * half;
  }

  // First chunk held in registers (all of the head when D <= 128).
  const int d0 = j * kChunk;
  const bool have0 = d0 < D;
  float v0[kChunk];
  if (have0) load_chunk(head + d0, v0);

  float norm = 0.0f;
  if constexpr (kNorm) norm = group_l2_norm(head, v0, have0, d0, D, mask);

  if (have0) finish_chunk<kNorm, kRope>(head, v0, d0, norm, g, scale, c, sn);
  for (int d = d0 + kSpan; d < D; d += kSpan) {
    float v[kChunk];
    load_chunk(head + d, v);  // not written yet: only this lane writes chunk d
    finish_chunk<kNorm, kRope>(head, v, d, norm, g, scale, c, sn);
  }
}

}  // namespace

void qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                const float* gamma0, const float* gamma1, float scale, const float* cos,
                const float* sin) {
  const int64_t T = x.size(0);
  const int64_t threads_total = T * slots * heads * kGroup;
  const bool norm = gamma0 != nullptr, rope = cos != nullptr;
  auto kernel = norm ? (rope ? qk_inplace_kernel<true, true> : qk_inplace_kernel<true, false>)
                     : qk_inplace_kernel<false, true>;
  kernel<<<grid_for(threads_total, kThreads), kThreads, 0, current_stream()>>>(
      x.data_as<uint16_t>(), row_stride, T, slots, heads, head_dim, gamma0, gamma1, scale, cos,
      sin);
  after_launch(norm && rope ? "qk_rmsnorm_rope_inplace" : norm ? "qk_rmsnorm_cross_inplace"
                                                               : "rope_inplace");
}

}  // namespace s3d::kernels::cuda
