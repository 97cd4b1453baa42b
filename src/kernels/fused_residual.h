// Gated residual add (article "sparse_batch_mul_add"), the end of a block's
// attention and MLP branches: out = x + gate[b] * h with b the token's asset and gate read by
// batch index from the [B, 6C] modulation.
//
// One entry point, gated_residual_add(..., fused, ...), runs either the reference chain
// (pure_eager: gather_rows -> [T, C], mul -> bf16, add -> bf16) or the fused kernel (fused::,
// flag gated_residual_add). Contract: the two are bitwise equal on either backend (no
// reduction, no transcendental): out = bf16(x + bf16(h * gate[b])) (math::gated_residual_chain).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

// x, h: bf16 [T, C]; gate: bf16 view of B rows of C; batch_index: i32 [T] in [0, B);
// out: bf16 [T, C]. fused: run the fused kernel where fused::gated_residual_add_unsupported
// allows it; a refused shape runs the reference chain and counts a gated_residual_add
// fallback (contract/fallback.h).
void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, bool fused, Tensor& out);

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
