// Gated residual add (issue 5, article "sparse_batch_mul_add"): out = x + gate[b] * h with b
// the token's asset and gate read by batch index from the [B, 6C] modulation inside the op.
// Replaces gather_rows -> [T, C], mul -> bf16, add -> bf16 (model/slat_flow.cpp
// `gated_residual`).
//
// Contract: bitwise equal to that chain on either backend (no reduction, no
// transcendental): out = bf16(x + bf16(h * gate[b])) (math::gated_residual_chain).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

// Why gated_residual_add cannot run on these operands, or "": C a multiple of 8 and every
// row 16-byte aligned (x, h, out, the gate view's first element and stride).
std::string gated_residual_add_unsupported(const Tensor& x, const Tensor& h, const RowView& gate,
                                           const Tensor& out);

// x, h: bf16 [T, C]; gate: bf16 view of B rows of C; batch_index: i32 [T] in [0, B);
// out: bf16 [T, C] (may be x itself: each element is read before it is written, by the same
// thread).
void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out);

}  // namespace s3d::kernels
