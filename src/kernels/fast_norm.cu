// The tolerance kernels on the GPU (fast_norm.h), written for memory bandwidth:
//   - every byte of a row (LayerNorm) or head (RMSNorm) is loaded once, 16 bytes per load,
//     and all of a thread's loads are issued before its first reduction, so that each warp
//     has several KB in flight (the bitwise twins re-read the row per pass and reduce in
//     fp64 in the reference's order, which serialises loads and arithmetic);
//   - the sums are fp32 (the statistics' error, ~1e-6 relative, stays far below the output's
//     bf16 ulp, 4e-3) and reduce by xor shuffles, no shared memory, no __syncthreads;
//   - one rounding per element, with the hardware's two-at-a-time fp32 -> bf16 conversion
//     (round to nearest even, as core/bf16.h; only NaN payloads could differ, and the
//     contract forbids NaN).
// Lane layouts and formulas: fast_norm_math.h, shared with the CPU version.
#include <cuda_bf16.h>

#include <cstring>

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/fast_norm_cuda.h"
#include "kernels/fast_norm_math.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

namespace fm = fastmath;

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Element e (0..7) of a 16-byte chunk of bf16.
__device__ __forceinline__ float elem(const uint4& c, int e) {
  const uint32_t w = e < 2 ? c.x : e < 4 ? c.y : e < 6 ? c.z : c.w;
  return (e & 1) ? hi_of(w) : lo_of(w);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
  uint32_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

__device__ __forceinline__ uint4 pack_chunk(const float (&v)[8]) {
  return make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                    pack_bf16x2(v[6], v[7]));
}

// Sum over `width` consecutive lanes (a power of two); the xor butterfly of
// fastmath::butterfly_sum. Every lane of the warp must call (full mask).
template <int kWidth>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---- modulated LayerNorm: one warp per token row, kLnRows rows per block ----

// 4 rows per block: at C = 1536 (94 registers) 5 blocks fit an SM, 20 warps with 3 KB of
// the row in flight each, and 3,664 rows make 916 blocks, a small last wave.
constexpr int kLnRows = 4;
constexpr int kLnThreads = kLnRows * 32;

// kN: 16-byte chunks per lane (the row's C / 8 chunks over 32 lanes, rounded up); lane l
// holds chunks l, l + 32, ... in registers from the first load to the store.
template <int kN>
__global__ void __launch_bounds__(kLnThreads)
fast_modulated_ln_kernel(const uint16_t* x, const uint16_t* shift, const uint16_t* scale,
                         int64_t mod_stride, int64_t mod_rows, const int32_t* batch_index,
                         int64_t rows, int C, float eps, uint16_t* y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const int chunks = C / 8;
  const int64_t b = batch_index[row];
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * C);
  uint4 xv[kN] = {}, sv[kN] = {}, tv[kN] = {};  // zeros where a lane has no chunk k
#pragma unroll
  for (int k = 0; k < kN; ++k)
    if (k * 32 + lane < chunks) xv[k] = xr[k * 32 + lane];
  checked_index(b, row, mod_rows, "fast modulated_layernorm", "batch_index", lane == 0);
  const uint4* sc = reinterpret_cast<const uint4*>(scale + b * mod_stride);
  const uint4* sh = reinterpret_cast<const uint4*>(shift + b * mod_stride);
  // The modulation rows (shared by all of an asset's tokens, so L2 hits) are loaded up front
  // too while they fit beside the row; past 8 chunks per lane they wait for the statistics,
  // which keeps the kernel out of local memory.
  auto load_mod = [&] {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if (k * 32 + lane < chunks) {
        sv[k] = sc[k * 32 + lane];
        tv[k] = sh[k * 32 + lane];
      }
    }
  };
  if constexpr (kN <= 8) load_mod();

  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k)
    if (k * 32 + lane < chunks)
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += elem(xv[k], e);
  const float mean = fm::ln_mean(group_sum<32>(sum), C);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k)
    if (k * 32 + lane < chunks)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float d = elem(xv[k], e) - mean;
        sq += d * d;
      }
  const float rstd = fm::ln_rstd(group_sum<32>(sq), C, eps);
  if constexpr (kN > 8) load_mod();

  uint4* yr = reinterpret_cast<uint4*>(y + row * C);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    if (k * 32 + lane < chunks) {
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        o[e] = fm::modulated_ln(elem(xv[k], e), mean, rstd, elem(sv[k], e), elem(tv[k], e));
      yr[k * 32 + lane] = pack_chunk(o);
    }
  }
}

// ---- q/k RMSNorm + RoPE: kQkLanes lanes per (token, slot, head) ----

constexpr int kQkThreads = 256;

// kN: chunks per lane (lane j holds chunks j, j + 8, ... of the head). Every load of the
// lane (x, gamma, cos, sin) is issued before the sum of squares.
template <int kN, bool kNorm, bool kRope>
__global__ void __launch_bounds__(kQkThreads)
fast_qk_kernel(uint16_t* x, int64_t stride, int64_t items, int slots, int H, int D,
               const float* gamma0, const float* gamma1, float scale, const float* cos,
               const float* sin) {
  constexpr int kL = fm::kQkLanes;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kL;
  const int j = threadIdx.x % kL;
  // No early return: the shuffles below take the whole warp, so a lane past the end stays,
  // loads nothing and adds zero.
  const bool active = item < items;
  const int chunks = D / 8;
  const int64_t heads_per_token = static_cast<int64_t>(slots) * H;
  const int64_t t = active ? item / heads_per_token : 0;
  const int sh = active ? static_cast<int>(item % heads_per_token) : 0;  // s * H + h
  const int s = sh / H, h = sh % H;
  uint16_t* head = x + t * stride + static_cast<int64_t>(sh) * D;
  const int half = D / 2;

  uint4 xv[kN] = {};  // zeros where a lane has no chunk k
  float4 gv[kN][2] = {}, cv[kN] = {}, sv[kN] = {};
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int c = k * kL + j;
    if (active && c < chunks) {
      xv[k] = reinterpret_cast<const uint4*>(head)[c];
      if constexpr (kNorm) {
        const float4* g = reinterpret_cast<const float4*>(
            (s == 0 ? gamma0 : gamma1) + static_cast<int64_t>(h) * D + c * 8);
        gv[k][0] = g[0];
        gv[k][1] = g[1];
      }
      if constexpr (kRope) {
        cv[k] = *reinterpret_cast<const float4*>(cos + t * half + c * 4);
        sv[k] = *reinterpret_cast<const float4*>(sin + t * half + c * 4);
      }
    }
  }

  float inv = 0.0f;
  if constexpr (kNorm) {
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (active && k * kL + j < chunks)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float v = elem(xv[k], e);
          a += v * v;
        }
    inv = fm::rms_inv_norm(group_sum<kL>(a));
  }

#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int c = k * kL + j;
    if (!(active && c < chunks)) continue;
    float v[kChunk];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = elem(xv[k], e);
    if constexpr (kNorm) {
      const float g[8] = {gv[k][0].x, gv[k][0].y, gv[k][0].z, gv[k][0].w,
                          gv[k][1].x, gv[k][1].y, gv[k][1].z, gv[k][1].w};
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = fm::rms_apply(v[e], inv, g[e], scale);
    }
    if constexpr (kRope) rope_rotate_chunk(v, cv[k], sv[k]);
    reinterpret_cast<uint4*>(head)[c] = pack_chunk(v);  // only this lane touches chunk c
  }
}

template <int kN>
void launch_qk(bool norm, bool rope, uint16_t* x, int64_t stride, int64_t items, int slots,
               int H, int D, const float* g0, const float* g1, float scale, const float* cos,
               const float* sin) {
  auto kernel = norm ? (rope ? fast_qk_kernel<kN, true, true> : fast_qk_kernel<kN, true, false>)
                     : fast_qk_kernel<kN, false, true>;
  kernel<<<grid_for(items * fm::kQkLanes, kQkThreads), kQkThreads, 0, current_stream()>>>(
      x, stride, items, slots, H, D, g0, g1, scale, cos, sin);
}

}  // namespace

void fast_modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                               const Tensor& batch_index, float eps, Tensor& out) {
  const int64_t rows = x.size(0);
  const int C = static_cast<int>(x.size(1));
  const unsigned blocks = grid_for(rows, kLnRows);
  const int need = fm::ln_chunks_per_lane(C);
  auto run = [&](auto kernel) {
    kernel<<<blocks, kLnThreads, 0, current_stream()>>>(
        x.data_as<uint16_t>(), static_cast<const uint16_t*>(shift.data()),
        static_cast<const uint16_t*>(scale.data()), shift.stride, shift.rows,
        batch_index.data_as<int32_t>(), rows, C, eps, out.data_as<uint16_t>());
  };
  // The smallest instantiation that holds the row (C = 1536: 6 chunks per lane, exact).
  if (need <= 1) run(fast_modulated_ln_kernel<1>);
  else if (need <= 2) run(fast_modulated_ln_kernel<2>);
  else if (need <= 4) run(fast_modulated_ln_kernel<4>);
  else if (need <= 6) run(fast_modulated_ln_kernel<6>);
  else if (need <= 8) run(fast_modulated_ln_kernel<8>);
  else if (need <= 12) run(fast_modulated_ln_kernel<12>);
  else run(fast_modulated_ln_kernel<fm::kLnMaxChunks>);  // the support rule caps C at 4096
  after_launch("fast_modulated_layernorm");
}

void fast_qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                     const float* gamma0, const float* gamma1, float scale, const float* cos,
                     const float* sin) {
  const int64_t items = x.size(0) * slots * heads;
  const bool norm = gamma0 != nullptr, rope = cos != nullptr;
  const int need = fm::qk_chunks_per_lane(head_dim);
  uint16_t* xp = x.data_as<uint16_t>();
  // D = 128: 2 chunks per lane. The support rule caps head_dim at 256 (4 chunks).
  if (need <= 1) {
    launch_qk<1>(norm, rope, xp, row_stride, items, slots, heads, head_dim, gamma0, gamma1,
                 scale, cos, sin);
  } else if (need <= 2) {
    launch_qk<2>(norm, rope, xp, row_stride, items, slots, heads, head_dim, gamma0, gamma1,
                 scale, cos, sin);
  } else {
    launch_qk<fm::kQkMaxChunks>(norm, rope, xp, row_stride, items, slots, heads, head_dim,
                                gamma0, gamma1, scale, cos, sin);
  }
  after_launch(norm && rope ? "fast_qk_rmsnorm_rope"
               : norm       ? "fast_qk_rmsnorm_cross"
                            : "fast_rope_inplace");
}

}  // namespace s3d::kernels::cuda
