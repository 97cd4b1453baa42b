// CUDA launchers of the sinusoidal embeddings (embedding.cu); called by embedding.cpp after
// validation, with frequency tables computed on the host.
#pragma once

#include "core/tensor.h"
#include "kernels/reference_math.h"

namespace s3d::kernels::cuda {

void timestep_embedding(const Tensor& t, const math::FreqTable& freqs, Tensor& out);
void ape_embedding(const Tensor& coords, const math::FreqTable& omegas, Tensor& out);

}  // namespace s3d::kernels::cuda
