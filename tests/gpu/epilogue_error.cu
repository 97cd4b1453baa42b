#include "epilogue_error.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d::testing {
namespace {

struct Sums {
  unsigned long long max_abs_bits, worst_bits, outside, non_finite;
  double num, den;
};

__device__ float bf16_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// As bf16_spacing in gelu_epilogue_contract.h.
__device__ double spacing(float x) {
  const float f = fabsf(x);
  if (!(f >= 0x1.0p-126f)) return 0x1.0p-133;
  if (isinf(f)) return INFINITY;
  const int e = static_cast<int>((__float_as_uint(f) >> 23) & 0xff) - 127;
  return ldexp(1.0, e - 7);
}

// Non-negative doubles order like their bit patterns as unsigned integers.
__device__ void max_bits(unsigned long long* dst, double v) {
  atomicMax(dst, static_cast<unsigned long long>(__double_as_longlong(v)));
}

__global__ void epilogue_error_kernel(const uint16_t* u, const uint16_t* ref, const uint16_t* fused,
                                      int64_t n, Sums* out) {
  double max_abs = 0, worst = 0, num = 0, den = 0;
  unsigned long long outside = 0, non_finite = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float fv = bf16_to_float(fused[i]), rv = bf16_to_float(ref[i]), uv = bf16_to_float(u[i]);
    if (!isfinite(fv)) {
      ++non_finite;
      continue;
    }
    const double d = fabs(double(fv) - double(rv));
    const double bound = 1.13 * spacing(uv) + spacing(fmaxf(fabsf(rv), fabsf(fv)));
    max_abs = fmax(max_abs, d);
    worst = fmax(worst, d / bound);
    if (d > bound) ++outside;
    num += d * d;
    den += double(rv) * double(rv);
  }
  max_bits(&out->max_abs_bits, max_abs);
  max_bits(&out->worst_bits, worst);
  atomicAdd(&out->outside, outside);
  atomicAdd(&out->non_finite, non_finite);
  atomicAdd(&out->num, num);
  atomicAdd(&out->den, den);
}

}  // namespace

EpilogueError gelu_epilogue_error_gpu(const Tensor& u, const Tensor& ref, const Tensor& fused) {
  for (const Tensor* t : {&u, &ref, &fused})
    S3D_CHECK(t->device() == Device::CUDA && t->dtype() == DType::BF16 &&
                  t->numel() == fused.numel(),
              "gelu_epilogue_error_gpu: bf16 CUDA tensors of one size expected, got ", t->describe());
  Sums* d = nullptr;
  S3D_CUDA_CHECK(cudaMalloc(&d, sizeof(Sums)));
  S3D_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(Sums), current_stream()));
  epilogue_error_kernel<<<1024, 256, 0, current_stream()>>>(
      u.data_as<uint16_t>(), ref.data_as<uint16_t>(), fused.data_as<uint16_t>(), fused.numel(), d);
  S3D_CUDA_CHECK(cudaGetLastError());
  Sums h{};
  S3D_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(Sums), cudaMemcpyDeviceToHost, current_stream()));
  S3D_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  cudaFree(d);
  EpilogueError e;
  std::memcpy(&e.max_abs, &h.max_abs_bits, sizeof(double));
  std::memcpy(&e.worst_excess, &h.worst_bits, sizeof(double));
  e.outside = static_cast<int64_t>(h.outside);
  e.non_finite = static_cast<int64_t>(h.non_finite);
  e.rel_l2 = h.den > 0 ? std::sqrt(h.num / h.den) : std::sqrt(h.num);
  return e;
}

}  // namespace s3d::testing
