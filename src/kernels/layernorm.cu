// LayerNorm on the GPU: one block per row. Pass 1 sums the row, pass 2 sums the squared
// deviations from the mean (both in double, block-reduced in a fixed order), pass 3 writes
// (x - mean) * rstd [* w] [+ b]; passes 2 and 3 re-read the row, which L1/L2 still hold.
// 16-byte chunks when C % 8 == 0 and every pointer is aligned, else one element per step.
#include <algorithm>

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/layernorm_cuda.h"
#include "kernels/layernorm_row.cuh"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

template <class Tin, class Tout, bool kVec>
__global__ void layer_norm_kernel(const Tin* x, const float* w, const float* b, Tout* y,
                                  int64_t C, float eps) {
  __shared__ double scratch[33];
  const Tin* xr = x + static_cast<int64_t>(blockIdx.x) * C;
  Tout* yr = y + static_cast<int64_t>(blockIdx.x) * C;
  const int64_t step = kVec ? kChunk : 1;
  const int64_t first = threadIdx.x * step, stride = blockDim.x * step;

  float mean, rstd;
  layer_norm_row_stats<Tin, kVec>(xr, C, eps, scratch, mean, rstd);
  for (int64_t i = first; i < C; i += stride) {
    if constexpr (kVec) {
      float v[kChunk];
      load_chunk(xr + i, v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) v[k] = math::layer_norm_apply(v[k], mean, rstd, w, b, i + k);
      store_chunk(yr + i, v);
    } else {
      yr[i] = from_float<Tout>(math::layer_norm_apply(to_float(xr[i]), mean, rstd, w, b, i));
    }
  }
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps,
                Tensor& out) {
  const int64_t C = x.size(-1);
  const int64_t rows = x.numel() / C;
  S3D_CHECK(rows < (int64_t{1} << 31), "layer_norm: ", rows, " rows exceed the grid limit");
  const float* w = weight ? weight->data_as<float>() : nullptr;
  const float* b = bias ? bias->data_as<float>() : nullptr;
  const bool vec = C % kChunk == 0 && aligned16(x.data()) && aligned16(out.data());
  const int threads = layer_norm_threads(C, vec);
  dispatch_float(x.dtype(), [&](auto tx) {
    dispatch_float(out.dtype(), [&](auto ty) {
      using Tin = decltype(tx);
      using Tout = decltype(ty);
      auto kernel = vec ? layer_norm_kernel<Tin, Tout, true> : layer_norm_kernel<Tin, Tout, false>;
      kernel<<<static_cast<unsigned>(rows), threads, 0, current_stream()>>>(
          x.data_as<Tin>(), w, b, out.data_as<Tout>(), C, eps);
      after_launch("layer_norm");
    });
  });
}

}  // namespace s3d::kernels::cuda
