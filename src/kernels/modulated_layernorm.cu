// Modulated LayerNorm on the GPU: one block per token row, the row statistics of the
// layer_norm kernel (layernorm_row.cuh: same blockDim, same order, same bits), then one
// pass that reads the token's asset b once and the scale/shift rows of b in 16-byte chunks.
// Rounding points per element (math::modulate_chain), those of the eager chain:
//   h = bf16((x - mean) * rstd); s = bf16(scale[b] + 1); m = bf16(h * s); out = bf16(m + shift[b])
// The row is read three times (sum, squares, apply) like layer_norm; the second and third
// reads hit L1/L2 (one row of C = 1536 is 3 KB).

#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/modulated_layernorm_cuda.h"
#include "kernels/layernorm_row.cuh"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

__global__ void modulated_layernorm_kernel(const uint16_t* x, const uint16_t* shift,
                                            const uint16_t* scale, int64_t mod_stride,
                                            int64_t mod_rows, const int32_t* batch_index,
                                            int64_t C, float eps, uint16_t* y) {
  __shared__ double scratch[33];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * C;
  uint16_t* yr = y + row * C;
  const int64_t b = checked_index(batch_index[row], row, mod_rows, "modulated_layernorm",
                                  "batch_index", threadIdx.x == 0);
  const uint16_t* sh = shift + b * mod_stride;
  const uint16_t* sc = scale + b * mod_stride;

  float mean, rstd;
  layer_norm_row_stats<uint16_t, true>(xr, C, eps, scratch, mean, rstd);
  for (int64_t i = threadIdx.x * kChunk; i < C; i += static_cast<int64_t>(blockDim.x) * kChunk) {
    float v[kChunk], s[kChunk], t[kChunk];
    load_chunk(xr + i, v);
    load_chunk(sc + i, s);
    load_chunk(sh + i, t);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float ln = math::layer_norm_apply(v[k], mean, rstd, nullptr, nullptr, i + k);
      v[k] = math::modulate_chain(ln, s[k], t[k]);
    }
    store_chunk(yr + i, v);
  }
}

}  // namespace

void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out) {
  const int64_t C = x.size(1), rows = x.size(0);
  S3D_CHECK(rows < (int64_t{1} << 31), "modulated_layernorm: ", rows,
            " rows exceed the grid limit");
  // The layer_norm op on the same row takes its vector path (C % 8 == 0, aligned), so the
  // same blockDim gives the same statistics.
  const int threads = layer_norm_threads(C, true);
  modulated_layernorm_kernel<<<static_cast<unsigned>(rows), threads, 0, current_stream()>>>(
      x.data_as<uint16_t>(), static_cast<const uint16_t*>(shift.data()),
      static_cast<const uint16_t*>(scale.data()), shift.stride, shift.rows,
      batch_index.data_as<int32_t>(), C, eps, out.data_as<uint16_t>());
  after_launch("modulated_layernorm");
}

}  // namespace s3d::kernels::cuda
