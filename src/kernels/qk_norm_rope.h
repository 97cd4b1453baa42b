// Per-head RMSNorm and 3-D rotary position embedding, as TRELLIS.2 runs them on the packed
// QKV tensor (modules/sparse/attention/{modules,rope}.py): two separate ops with a bf16
// rounding between them.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// out[t, h, :] = x[t, h, :] / max(||x[t, h, :]||_2, 1e-12) * gamma[h, :] * sqrt(D), in fp32
// in exactly that order (F.normalize, then * gamma, then * scale), rounded once to out's
// dtype. x: a view of T rows of H*D bf16 elements (e.g. the q or k slot of [T, 3, H, D]);
// gamma: f32 [H, D]; out: bf16 [T, H, D] contiguous.
void head_rmsnorm(const RowView& x, const Tensor& gamma, int heads, int head_dim, Tensor& out);

// RoPE phases for one request: for token t with grid coordinates (x, y, z) = coords[t, 1..3]
// and freq_dim = head_dim / 2 / 3 frequencies omega_j = f0 / theta^(j / freq_dim) (fp32, as
// torch computes them), phase p < 3*freq_dim is coord[p / freq_dim] * omega[p % freq_dim];
// the rest up to head_dim / 2 are 0. cos_out, sin_out: f32 [T, head_dim / 2].
void rope_phases(const Tensor& coords, int head_dim, float f0, float theta, Tensor& cos_out,
                 Tensor& sin_out);

// out[t, h, 2p], out[t, h, 2p+1] = (a cos - b sin, a sin + b cos) with (a, b) the fp32
// values of x[t, h, 2p], x[t, h, 2p+1] and the phase p of token t; rounded once to out's
// dtype. x: bf16 [T, H, D]; out: bf16 [T, H, D]; cos, sin: f32 [T, D/2].
void rope_apply(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& out);

}  // namespace s3d::kernels
