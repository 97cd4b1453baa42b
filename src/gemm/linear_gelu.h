// The MLP's first layer and its activation, out = GELU-tanh(x W^T + b). One entry
// point over the three paths the article kept:
//   epilogue (flag gemm_gelu_epilogue): one cuBLASLt call with the bias+GELU epilogue, GELU
//     on the fp32 accumulator and one rounding: a bounded error, not bitwise
//     (tests/gelu_epilogue_contract.h);
//   else pure_eager's rounding points: the GEMM rounded to a bf16 [M, N] temporary, then the
//     GELU map (kernels::mlp_gelu; wide_gelu: the wide kernel, flag gelu_tanh; bitwise
//     either way).
// A fused rounding-preserving variant (GEMM -> bf16 -> GELU in one kernel) would need an own
// GEMM: cuBLASLt's GELU epilogues apply GELU to the fp32 accumulator, not to its bf16 rounding.
#pragma once

#include "core/tensor.h"

namespace s3d::gemm {

// x: bf16 [M, K]; weight: bf16 [N, K]; bias: bf16 [N]; out: bf16 [M, N]. wide_gelu has no
// effect with the epilogue.
void linear_gelu(const Tensor& x, const Tensor& weight, const Tensor* bias, bool epilogue,
                 bool wide_gelu, Tensor& out);

}  // namespace s3d::gemm
