// The row statistics of the LayerNorm kernel, shared by layer_norm (layernorm.cu) and the
// fused modulated LayerNorm (modulated_layernorm.cu) so that both reduce in the same order and get
// the same mean and rstd bits: pass 1 sums the row, pass 2 the squared deviations from the
// mean (both in double, each thread over its elements in order, then block_sum's fixed
// order); mean and rstd are rounded to fp32 once. Thread i owns the elements (or 16-byte
// chunks when kVec) i, i + blockDim, ...; the launch picks blockDim (layer_norm_threads).
#pragma once

#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {

// Threads per row block for a row of C elements (the vector path steps 8 at a time).
inline int layer_norm_threads(int64_t C, bool vec) {
  const int64_t steps = vec ? C / kChunk : C;
  return static_cast<int>(std::clamp<int64_t>((steps + 31) / 32 * 32, 32, 512));
}

// Every thread of the block must call this (block_sum synchronises).
template <class Tin, bool kVec>
__device__ __forceinline__ void layer_norm_row_stats(const Tin* xr, int64_t C, float eps,
                                                     double* scratch, float& mean, float& rstd) {
  const int64_t step = kVec ? kChunk : 1;
  const int64_t first = threadIdx.x * step, stride = blockDim.x * step;

  double sum = 0.0;
  for (int64_t i = first; i < C; i += stride) {
    if constexpr (kVec) {
      float v[kChunk];
      load_chunk(xr + i, v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) sum += v[k];
    } else {
      sum += to_float(xr[i]);
    }
  }
  sum = block_sum(sum, scratch);
  const double mean_d = sum / static_cast<double>(C);

  double sum_sq = 0.0;
  for (int64_t i = first; i < C; i += stride) {
    if constexpr (kVec) {
      float v[kChunk];
      load_chunk(xr + i, v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const double d = v[k] - mean_d;
        sum_sq += d * d;
      }
    } else {
      const double d = to_float(xr[i]) - mean_d;
      sum_sq += d * d;
    }
  }
  sum_sq = block_sum(sum_sq, scratch);

  mean = math::mean_from_sum(sum, C);
  rstd = math::layer_norm_rstd(math::mean_from_sum(sum_sq, C), eps);
}

}  // namespace s3d::kernels::cuda
