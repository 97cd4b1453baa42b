// Modulated LayerNorm (issue 5, article 4.2): LayerNorm without affine, then AdaLN's
// (1 + scale[b]) * h + shift[b] with b the token's asset, scale and shift read by batch
// index from the [B, 6C] modulation inside the op. Replaces layer_norm -> bf16 [T, C],
// add_scalar -> bf16 [B, C], gather_rows -> [T, C], mul -> bf16, gather_rows -> [T, C],
// add -> bf16 (model/slat_flow.cpp `modulate`).
//
// Contract: bitwise equal to that chain on the same backend: every bf16 store of the chain is
// kept as a rounding (math::modulate_chain), and the row statistics are the layer_norm
// op's (same reduction order on each backend).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

// Why modulated_layer_norm cannot run on these operands, or "": C a multiple of 8 and every
// row 16-byte aligned (x, out, the shift/scale views' first element and stride). Same rule on
// both backends.
std::string modulated_layer_norm_unsupported(const Tensor& x, const RowView& shift,
                                             const RowView& scale, const Tensor& out);

// x: bf16 [T, C]; shift, scale: bf16 views of B rows of C (chunks of the modulation);
// batch_index: i32 [T], entries in [0, B) (the GPU traps on others, like gather_rows);
// out: bf16 [T, C]. Per element:
//   out = bf16(bf16(bf16(LN(x)) * bf16(scale[b] + 1)) + shift[b]),  LN = (x - mean) * rstd
// with mean, rstd those of layer_norm(x, no affine, eps).
void modulated_layer_norm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out);

}  // namespace s3d::kernels
