// The op linear_gelu: the MLP's first layer and its activation, out = GELU-tanh(x W^T + b).
// Candidates, in try order:
//   gemm_gelu_epilogue (tolerance): one cuBLASLt call with the bias+GELU epilogue, GELU on the
//     fp32 accumulator and one rounding (tests/gelu_epilogue_contract.h bounds it);
//   gelu_tanh (bitwise): the GEMM rounded to a bf16 [M, N] temporary, then the wide GELU
//     kernel (kernels/gelu_tanh.h).
// The reference is pure_eager's rounding points: the GEMM to bf16, then the GELU map
// (kernels::gelu_tanh). A rounding-preserving fused GEMM+GELU would need a GEMM of our own:
// cuBLASLt's GELU epilogues apply GELU to the fp32 accumulator, not to its bf16 rounding.
#pragma once

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

struct LinearWeights;

// x: bf16 [M, K]; w: the layer [N, K] in its weight format (ops/weight_format.h; the GEMM is
// the format's apply, and the epilogue candidate takes the plain format only); out: bf16 [M, N].
void linear_gelu(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& out);
// The same for a plain layer: weight bf16 [N, K], bias bf16 [N] or null.
void linear_gelu(const OpPlan& plan, const Tensor& x, const Tensor& weight, const Tensor* bias,
                 Tensor& out);

}  // namespace s3d::ops
