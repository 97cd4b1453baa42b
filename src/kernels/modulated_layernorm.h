// Modulated LayerNorm (article 4.2), the AdaLN input of a block's attention and MLP
// branches: LayerNorm without affine, then (1 + scale[b]) * h + shift[b] with b the token's
// asset, scale and shift read by batch index from the [B, 6C] modulation.
//
// Two implementations of the op modulated_layernorm (ops/modulated_layernorm.h chooses):
// reference:: is pure_eager's chain (layer_norm -> bf16 [T, C], add_scalar -> bf16 [B, C],
// gather_rows -> [T, C], mul -> bf16, gather_rows -> [T, C], add -> bf16), fused:: the
// candidate of flag modulated_layernorm, one pass and no temporaries. Contract: the two are
// bitwise equal on the same backend: every bf16 store of the chain is kept as a rounding
// (math::modulate_chain), and the row statistics are the layer_norm op's (same reduction
// order on each backend). The tolerance candidate is fast::modulated_layernorm (fast_norm.h).
#pragma once

#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

namespace reference {

// x: bf16 [T, C]; shift, scale: bf16 views of B rows of C (chunks of the modulation);
// batch_index: i32 [T], entries in [0, B); out: bf16 [T, C]. Per element:
//   out = bf16(bf16(bf16(LN(x)) * bf16(scale[b] + 1)) + shift[b]),  LN = (x - mean) * rstd
// with mean, rstd those of layer_norm(x, no affine, eps). Every shape.
void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                         const Tensor& batch_index, float eps, Tensor& out);

}  // namespace reference

namespace fused {

// Why the fused kernel cannot run on these operands, or "": C a multiple of 8 and every row
// 16-byte aligned (x, out, the shift/scale views' first element and stride). Same rule on
// both backends, so that a CPU test sees the fallbacks a GPU run would take.
std::string modulated_layernorm_unsupported(const Tensor& x, const RowView& shift,
                                             const RowView& scale, const Tensor& out);

// The fused kernel, same operands and result as reference::modulated_layernorm: one pass, no
// temporaries (the GPU traps on a batch index outside [0, B), like gather_rows). Throws on a
// shape modulated_layernorm_unsupported refuses: it never silently degrades.
void modulated_layernorm(const Tensor& x, const RowView& shift, const RowView& scale,
                          const Tensor& batch_index, float eps, Tensor& out);

}  // namespace fused
}  // namespace s3d::kernels
