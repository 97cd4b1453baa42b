// The op gated_residual_add: the end of a block's attention and MLP branches,
// out = x + gate[b] * h, b the token's asset (kernels/gated_residual_add.h). Candidate:
// gated_residual_add (bitwise); the reference is pure_eager's chain.
#pragma once

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

// x, h: bf16 [T, C]; gate: bf16 view of B rows of C; batch_index: i32 [T] in [0, B);
// out: bf16 [T, C] (may be x).
void gated_residual_add(const OpPlan& plan, const Tensor& x, const Tensor& h,
                        const RowView& gate, const Tensor& batch_index, Tensor& out);

}  // namespace s3d::ops
