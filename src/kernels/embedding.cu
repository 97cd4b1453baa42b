// Sinusoidal embedding kernels: one thread per output element. The frequency tables arrive
// by value (computed on the host exactly as the CPU oracle uses them), so the GPU and the
// oracle differ only in cosf/sinf.
#include "core/cuda_util.h"
#include "kernels/cuda_common.cuh"
#include "kernels/embedding_cuda.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// out[b, k]: cos(t f_k) for k < half, sin(t f_{k-half}) for k < 2 half, else 0.
__global__ void timestep_embedding_kernel(const float* t, int64_t B, int64_t dim,
                                          math::FreqTable freqs, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * dim) return;
  const int64_t b = i / dim, k = i % dim, half = freqs.count;
  float v = 0.0f;
  if (k < half) {
    v = cosf(t[b] * freqs.value[k]);
  } else if (k < 2 * half) {
    v = sinf(t[b] * freqs.value[k - half]);
  }
  out[i] = v;
}

// out[t, k], k = a * 2 fd + s * fd + j (axis a, s = 0 sin / 1 cos, frequency j), 0 past 6 fd.
__global__ void ape_embedding_kernel(const int32_t* coords, int64_t T, int64_t C,
                                     math::FreqTable omegas, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  const int64_t t = i / C, k = i % C, fd = omegas.count;
  float v = 0.0f;
  if (k < 6 * fd) {
    const int64_t a = k / (2 * fd), w = k % (2 * fd);
    const float arg = static_cast<float>(coords[t * 4 + 1 + a]) * omegas.value[w % fd];
    v = w < fd ? sinf(arg) : cosf(arg);
  }
  out[i] = v;
}

}  // namespace

void timestep_embedding(const Tensor& t, const math::FreqTable& freqs, Tensor& out) {
  const int64_t B = out.size(0), dim = out.size(1);
  timestep_embedding_kernel<<<grid_for(B * dim, kThreads), kThreads, 0, current_stream()>>>(
      t.data_as<float>(), B, dim, freqs, out.data_as<float>());
  after_launch("timestep_embedding");
}

void ape_embedding(const Tensor& coords, const math::FreqTable& omegas, Tensor& out) {
  const int64_t T = out.size(0), C = out.size(1);
  ape_embedding_kernel<<<grid_for(T * C, kThreads), kThreads, 0, current_stream()>>>(
      coords.data_as<int32_t>(), T, C, omegas, out.data_as<float>());
  after_launch("ape_embedding");
}

}  // namespace s3d::kernels::cuda
