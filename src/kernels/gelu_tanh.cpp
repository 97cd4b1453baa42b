// The wide GELU: the kernel's argument checks and dispatch (its CPU
// version is the reference op's loop).
#include "kernels/gelu_tanh.h"

#include "kernels/elementwise.h"
#include "kernels/gelu_tanh_cuda.h"
#include "kernels/kernel_checks.h"

namespace s3d::kernels {

namespace fused {

void gelu_tanh(const Tensor& x, Tensor& out) {
  const char* op = "fused gelu_tanh";
  detail::check_dtype(x, DType::BF16, op, "x");
  detail::check_dtype(out, DType::BF16, op, "out");
  detail::check_same_shape(out, x, op, "out", "x");
  detail::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (x.numel() == 0) return;
  if (x.is_cuda()) {
    cuda::gelu_tanh_wide(x, out);
  } else {
    kernels::gelu_tanh(x, out);  // the CPU has one GELU loop: the reference op's
  }
}

}  // namespace fused

}  // namespace s3d::kernels
