// Gated residual add (article "sparse_batch_mul_add"), the end of a block's attention and MLP
// branches: out = x + gate[b] * h with b the token's asset and gate read by batch index from
// the [B, 6C] modulation.
//
// Two implementations of the op gated_residual_add (ops/gated_residual_add.h chooses):
// reference:: is pure_eager's chain (gather_rows -> [T, C], mul -> bf16, add -> bf16),
// fused:: the candidate of flag gated_residual_add. Contract: the two are bitwise equal on
// either backend (no reduction, no transcendental): out = bf16(x + bf16(h * gate[b]))
// (math::gated_residual_chain).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

namespace reference {

// x, h: bf16 [T, C]; gate: bf16 view of B rows of C; batch_index: i32 [T] in [0, B);
// out: bf16 [T, C]. Every shape.
void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out);

}  // namespace reference

namespace fused {

// Why the fused kernel cannot run on these operands, or "": C a multiple of 8 and every row
// 16-byte aligned (x, h, out, the gate view's first element and stride).
std::string gated_residual_add_unsupported(const Tensor& x, const Tensor& h, const RowView& gate,
                                           const Tensor& out);

// The fused kernel. out may be x itself (each element is read before it is written, by the
// same thread). Throws on a shape gated_residual_add_unsupported refuses.
void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out);

}  // namespace fused
}  // namespace s3d::kernels
