#include "core/measure.h"

#include <cuda_runtime.h>

#include <vector>

#include "core/cuda_util.h"
#include "core/error.h"
#include "core/rng.h"

namespace s3d {

double time_calls(const std::function<void(int)>& fn, int warmup, int calls) {
  S3D_CHECK(calls >= 1, "time_calls: calls must be >= 1, got ", calls);
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t a, b;
  S3D_CUDA_CHECK(cudaEventCreate(&a));
  S3D_CUDA_CHECK(cudaEventCreate(&b));
  S3D_CUDA_CHECK(cudaEventRecord(a, current_stream()));
  for (int i = 0; i < calls; ++i) fn(i);
  S3D_CUDA_CHECK(cudaEventRecord(b, current_stream()));
  S3D_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  S3D_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e-3 / calls;
}

Tensor random_device(const Shape& shape, DType dtype, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  normal_fill(seed, 0, v.size(), v.data());
  if (scale != 1.0f)
    for (float& x : v) x *= scale;
  return Tensor::from_floats(v, shape, dtype).to(Device::CUDA);
}

void measure_copy_rate(double& bytes, double& seconds) {
  const size_t n = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  S3D_CUDA_CHECK(cudaMalloc(&src, n));
  S3D_CUDA_CHECK(cudaMalloc(&dst, n));
  S3D_CUDA_CHECK(cudaMemsetAsync(src, 1, n, current_stream()));
  seconds = time_calls([&](int) {
    S3D_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, current_stream()));
  }, 1, 20);
  bytes = 2.0 * static_cast<double>(n);
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace s3d
