// Ragged offsets for the cuDNN SDPA graph, made on the device from the layout's cu_seqlens so
// that a forward pass never copies per-request data from the host. The caller has checked
// that cu_seqlens[n - 1] * stride fits in int32.
#include <cstdint>

#include "attention/cudnn_sdpa.h"
#include "core/cuda_util.h"

namespace s3d::attention::detail {
namespace {

__global__ void ragged_offsets_kernel(const int32_t* cu_seqlens, int n, int32_t stride,
                                      int32_t* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = cu_seqlens[i] * stride;
}

}  // namespace

void launch_ragged_offsets(const int32_t* cu_seqlens, int n, int32_t stride, int32_t* out,
                           cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kBlock = 128;
  ragged_offsets_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(cu_seqlens, n, stride, out);
  after_launch("ragged_offsets");
}

}  // namespace s3d::attention::detail
