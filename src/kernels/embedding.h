// Sinusoidal embeddings of the timestep and (pe_mode "ape") of voxel positions, fp32.
#pragma once

#include "core/tensor.h"

namespace s3d::kernels {

// out[b, :] = [cos(t[b] f), sin(t[b] f)] with f_i = exp(-ln(10000) i / half), i < half =
// dim / 2, computed in fp32 as TimestepEmbedder.timestep_embedding; a zero column is appended
// when dim is odd. t: f32 [B] (already 1000 * t); out: f32 [B, dim].
void timestep_embedding(const Tensor& t, Tensor& out);

// AbsolutePositionEmbedder: freq_dim = C / 3 / 2, omega_j = 1 / 10000^(j / freq_dim); for
// each axis a in x, y, z: [sin(coord_a omega), cos(coord_a omega)] (sin first), axes
// concatenated, zero-padded to C. coords: i32 [T, 4]; out: f32 [T, C].
void ape_embedding(const Tensor& coords, Tensor& out);

}  // namespace s3d::kernels
