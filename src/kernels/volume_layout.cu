// Batched transpose for the volume <-> token layouts: 32 x 32 tiles through shared memory,
// so that reads and writes are both coalesced (the channel count of a dense latent is small,
// 8, so a naive per-element kernel would stride by N on one side).
#include "core/cuda_util.h"
#include "core/error.h"
#include "kernels/volume_layout_cuda.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRows = 8;  // threads per tile column: each thread moves kTile / kRows values

// out[b, q, p] = in[b, p, q]; grid (ceil(Q / 32), ceil(P / 32), B).
__global__ void transpose_kernel(const float* in, int64_t P, int64_t Q, float* out) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t b = blockIdx.z;
  const int64_t p0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const float* src = in + b * P * Q;
  float* dst = out + b * P * Q;
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t p = p0 + r, q = q0 + threadIdx.x;
    if (p < P && q < Q) tile[r][threadIdx.x] = src[p * Q + q];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile; r += kRows) {
    const int64_t q = q0 + r, p = p0 + threadIdx.x;
    if (p < P && q < Q) dst[q * P + p] = tile[threadIdx.x][r];
  }
}

}  // namespace

void transpose_batched(const Tensor& in, int64_t B, int64_t P, int64_t Q, Tensor& out) {
  S3D_CHECK(B <= 65535, "transpose: ", B, " assets in one call (at most 65535)");
  const dim3 grid(static_cast<unsigned>((Q + kTile - 1) / kTile),
                  static_cast<unsigned>((P + kTile - 1) / kTile), static_cast<unsigned>(B));
  S3D_CHECK((P + kTile - 1) / kTile <= 65535, "transpose: ", P, " rows per asset is too many");
  transpose_kernel<<<grid, dim3(kTile, kRows), 0, current_stream()>>>(in.data_as<float>(), P, Q,
                                                                      out.data_as<float>());
  after_launch("volume_transpose");
}

}  // namespace s3d::kernels::cuda
