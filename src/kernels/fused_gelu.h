// The gelu_tanh candidate (issue 5, article section 5): a second standalone GELU kernel for
// bf16, two 16-byte chunks per thread with both loads issued before any math (the reference
// elementwise map does one chunk per thread). Same formula (math::gelu_tanh), same single
// rounding: bitwise equal to kernels::gelu_tanh on the same backend. It does not remove the
// memory round trip the article cared about (gemm_gelu_epilogue does); it is kept to measure
// whether the launch shape alone matters. On the CPU it is the reference loop.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// x, out: bf16, same shape, any element count (the tail that fills no whole chunk is
// handled element by element). out may be x.
void gelu_tanh_wide(const Tensor& x, Tensor& out);

}  // namespace s3d::kernels
