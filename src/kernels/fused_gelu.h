// The MLP's GELU-tanh (article section 5). One entry point, mlp_gelu(..., fused, ...),
// runs either the reference elementwise map (kernels::gelu_tanh, one 16-byte chunk per
// thread) or the gelu_tanh candidate (fused::gelu_tanh_wide, flag gelu_tanh): two 16-byte
// chunks per thread with both loads issued before any math. Same formula (math::gelu_tanh),
// same single rounding: bitwise equal on the same backend. The candidate does not remove the
// memory round trip the article cared about (gemm_gelu_epilogue does, gemm/linear_gelu.h); it
// is kept to measure whether the launch shape alone matters. On the CPU it is the reference
// loop.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// x, out: bf16, same shape, any element count. out may be x. Every shape is supported: no
// fallback.
void mlp_gelu(const Tensor& x, bool fused, Tensor& out);

namespace fused {

// The wide kernel; the tail that fills no whole chunk is handled element by element.
void gelu_tanh_wide(const Tensor& x, Tensor& out);

}  // namespace fused
}  // namespace s3d::kernels
