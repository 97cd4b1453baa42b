// scale_columns_add_bias: one thread per element, fmaf as the CPU loop's std::fma, one
// rounding to bf16 at the store. The bias is read in its own dtype (a template argument).
#include "core/cuda_util.h"
#include "kernels/column_scale_cuda.h"
#include "kernels/cuda_common.cuh"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class B>
__global__ void scale_columns_kernel(uint16_t* y, const float* scale, const B* bias, int64_t n,
                                     int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t c = i % cols;
  const float b = bias == nullptr ? 0.0f : to_float(bias[c]);
  y[i] = float_to_bf16(fmaf(bf16_to_float(y[i]), scale[c], b));
}

template <class B>
void launch(Tensor& y, const Tensor& scale, const B* bias) {
  const int64_t n = y.numel();
  scale_columns_kernel<B><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      y.data_as<uint16_t>(), scale.data_as<float>(), bias, n, y.size(1));
  after_launch("scale_columns_add_bias");
}

}  // namespace

void scale_columns_add_bias(Tensor& y, const Tensor& scale, const Tensor* bias) {
  if (bias != nullptr && bias->dtype() == DType::BF16) {
    launch(y, scale, bias->data_as<uint16_t>());
  } else {
    launch(y, scale, bias == nullptr ? static_cast<const float*>(nullptr) : bias->data_as<float>());
  }
}

}  // namespace s3d::kernels::cuda
