// Gated residual add on the GPU: one thread per 16-byte chunk of 8 elements (C % 8 == 0, so
// a chunk never crosses a row); the thread reads its token's asset b and the matching gate
// chunk (gate rows are B x C: L1/L2 resident). Rounding points per element, those of the
// eager chain (math::gated_residual_chain): m = bf16(h * gate[b]); out = bf16(x + m).

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/gated_residual_add_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gated_residual_add_kernel(const uint16_t* x, const uint16_t* h,
                                          const uint16_t* gate, int64_t gate_stride,
                                          int64_t gate_rows, const int32_t* batch_index,
                                          int64_t C, int64_t n, uint16_t* out) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (i0 >= n) return;
  const int64_t t = i0 / C, c = i0 % C;
  const int64_t b = checked_index(batch_index[t], t, gate_rows, "gated_residual_add",
                                  "batch_index", true);
  float xv[kChunk], hv[kChunk], gv[kChunk];
  load_chunk(x + i0, xv);
  load_chunk(h + i0, hv);
  load_chunk(gate + b * gate_stride + c, gv);
#pragma unroll
  for (int k = 0; k < kChunk; ++k) xv[k] = math::gated_residual_chain(xv[k], hv[k], gv[k]);
  store_chunk(out + i0, xv);
}

}  // namespace

void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out) {
  const int64_t n = x.numel(), C = x.size(1);
  gated_residual_add_kernel<<<grid_for(n / kChunk, kThreads), kThreads, 0, current_stream()>>>(
      x.data_as<uint16_t>(), h.data_as<uint16_t>(), static_cast<const uint16_t*>(gate.data()),
      gate.stride, gate.rows, batch_index.data_as<int32_t>(), C, n, out.data_as<uint16_t>());
  after_launch("gated_residual_add");
}

}  // namespace s3d::kernels::cuda
