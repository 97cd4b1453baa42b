// The wide GELU-tanh kernel, the bitwise candidate of flag gelu_tanh for the op linear_gelu
// (ops/linear_gelu.h; article section 5): two 16-byte chunks per thread with both loads issued
// before any math. Same formula as the reference map kernels::gelu_tanh (elementwise.h,
// math::gelu_tanh), same single rounding: bitwise equal on the same backend. It does not
// remove the memory round trip the article cared about (gemm_gelu_epilogue does); it is kept
// to measure whether the launch shape alone matters. On the CPU it is the reference loop.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels::fused {

// x, out: bf16, same shape, any element count (the tail that fills no whole chunk is handled
// element by element). out may be x. Every shape is supported.
void gelu_tanh(const Tensor& x, Tensor& out);

}  // namespace s3d::kernels::fused
