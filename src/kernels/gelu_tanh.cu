// gelu_tanh_wide: thread i owns the chunks 2i and 2i + 1 of 8 bf16 elements (32 bytes),
// loads both before computing; one rounding per element: out = bf16(gelu_tanh(x)).
// Scalar code for a misaligned tensor and for the tail past the last whole chunk.
#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/gelu_tanh_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPer = 2 * kChunk;  // elements per thread

__global__ void gelu_tanh_wide_kernel(const uint16_t* x, uint16_t* out, int64_t n, bool vec) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (i0 >= n) return;
  if (vec && i0 + kPer <= n) {
    float a[kChunk], b[kChunk];
    load_chunk(x + i0, a);
    load_chunk(x + i0 + kChunk, b);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      a[k] = math::gelu_tanh(a[k]);
      b[k] = math::gelu_tanh(b[k]);
    }
    store_chunk(out + i0, a);
    store_chunk(out + i0 + kChunk, b);
    return;
  }
  for (int64_t i = i0; i < n && i < i0 + kPer; ++i)
    out[i] = float_to_bf16(math::gelu_tanh(bf16_to_float(x[i])));
}

}  // namespace

void gelu_tanh_wide(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  const bool vec = aligned16(x.data()) && aligned16(out.data());
  gelu_tanh_wide_kernel<<<grid_for((n + kPer - 1) / kPer, kThreads), kThreads, 0,
                          current_stream()>>>(x.data_as<uint16_t>(), out.data_as<uint16_t>(), n,
                                              vec);
  after_launch("gelu_tanh_wide");
}

}  // namespace s3d::kernels::cuda
