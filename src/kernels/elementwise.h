// Elementwise ops of the reference path, one launch each, in PyTorch eager's rounding:
// inputs are widened to fp32, the op runs in fp32, the result is rounded once to the output
// dtype. No op contracts a*b+c into an FMA (the build passes --fmad=false), so the CUDA and
// CPU versions agree bitwise. Every op dispatches on the device of its operands.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// out = x converted to out's dtype (bf16 <-> f32, or a copy). Same shape.
void cast(const Tensor& x, Tensor& out);

// out = a + b and out = a * b, computed in fp32. `b` has a's shape, or is one row that is
// broadcast over a's rows (b.numel() == a's last dimension, as `self.modulation + mod`).
// Any mix of bf16 and f32 inputs; out has a's shape and its own dtype.
void add(const Tensor& a, const Tensor& b, Tensor& out);
void mul(const Tensor& a, const Tensor& b, Tensor& out);

// out[r, c] = x[r, c] + s, computed in fp32 (`1 + scale_msa` on a [B, 6C] chunk).
// out is contiguous [x.rows, x.cols].
void add_scalar(const RowView& x, float s, Tensor& out);

// out[t, :] = src[index[t], :] (the eager `scale[batch_ids]` gather that materialises
// [T, C]). index: i32 [T], every entry in [0, src.rows); out: [T, src.cols], src's dtype.
void gather_rows(const RowView& src, const Tensor& index, Tensor& out);

// dst row r = src row r, element by element, same dtype (the eager torch.stack of q, k, v).
void copy_rows(const RowView& src, RowView& dst);

// out row r = row, for every row of out (the constant null-context attention output v0
// written into [N, C]). row: numel == out's last dimension, same dtype. Raw bits, no rounding.
void broadcast_row(const Tensor& row, Tensor& out);

// SiLU in fp32: x / (1 + exp(-x)), any float dtype in and out. Same shape.
void silu(const Tensor& x, Tensor& out);

// GELU with the tanh approximation, fp32 math, as aten::gelu(approximate="tanh"):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). bf16 or f32, same shape.
void gelu_tanh(const Tensor& x, Tensor& out);

}  // namespace s3d::kernels
