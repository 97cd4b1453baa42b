#include "gemm/linear_gelu.h"

#include "gemm/linear.h"
#include "kernels/fused_gelu.h"

namespace s3d::gemm {

void linear_gelu(const Tensor& x, const Tensor& weight, const Tensor* bias, bool epilogue,
                 bool wide_gelu, Tensor& out) {
  if (epilogue) {
    linear(x, weight, bias, out, Epilogue::BiasGelu);
    return;
  }
  Tensor u = Tensor::empty(out.shape(), out.dtype(), out.device());
  linear(x, weight, bias, u);
  kernels::mlp_gelu(u, wide_gelu, out);
}

}  // namespace s3d::gemm
