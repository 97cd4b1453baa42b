// The op linear: y = x W^T + b through cuBLASLt (GPU) or the CPU loop (gemm/linear.h).
// Reference: the heuristic's first algorithm, as PyTorch's addmm runs it. Candidate:
//   tuned_gemm (tolerance): the fastest of up to 16 of the heuristic's algorithms, timed once
//     per shape on the call's own operands and kept in the plan's store (the engine's
//     qualification cache); no effect on the CPU. Refuses an output that overlaps an input
//     (the search runs the product into it many times).
// Every linear layer of the model (the trunk's, the condition-side and modulation GEMMs, the
// null-context qualification's) is a call of this op.
#pragma once

#include "core/tensor.h"
#include "gemm/linear.h"
#include "ops/op.h"

namespace s3d::ops {

// x: [M, K]; weight: [N, K]; bias: [N] or null; y: [M, N]; all bf16 or all f32.
void linear(const OpPlan& plan, const Tensor& x, const Tensor& weight, const Tensor* bias,
            Tensor& y, gemm::Epilogue epilogue = gemm::Epilogue::Bias);

}  // namespace s3d::ops
