// The op modulated_layernorm: a block's AdaLN input, LayerNorm without affine then
// (1 + scale[b]) * h + shift[b], b the token's asset (kernels/modulated_layernorm.h).
// Candidates, in try order: fast_modulated_layernorm (tolerance, kernels/fast_norm.h), then
// modulated_layernorm (bitwise); the reference is pure_eager's chain.
#pragma once

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

// x: bf16 [T, C]; shift, scale: bf16 views of B rows of C; batch_index: i32 [T] in [0, B);
// out: bf16 [T, C].
void modulated_layernorm(const OpPlan& plan, const Tensor& x, const RowView& shift,
                         const RowView& scale, const Tensor& batch_index, float eps,
                         Tensor& out);

}  // namespace s3d::ops
