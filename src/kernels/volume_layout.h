// The dense model's layout change: a volume [B, C, R, R, R] (channels first, as TRELLIS.2's
// sparse-structure latent) to tokens [B R^3, C] (channels last, asset b's voxels at rows
// b R^3 .. (b + 1) R^3 - 1 in raster order n = i R^2 + j R + k), and back. Pure copies of
// f32 values: the GPU and CPU versions agree bit for bit.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// tokens[b N + n, c] = volume[b, c, n]. volume: f32 [B, C, d1, ..., dk] (N = d1 ... dk, at
// least one spatial dimension); tokens: f32 [B N, C], contiguous, same device.
void volume_to_tokens(const Tensor& volume, Tensor& tokens);

// volume[b, c, n] = tokens[b N + n, c]: the inverse.
void tokens_to_volume(const Tensor& tokens, Tensor& volume);

}  // namespace s3d::kernels
