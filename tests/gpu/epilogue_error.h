// The gemm_gelu_epilogue contract's per-element check (gelu_epilogue_contract.h) computed on
// the GPU, for the full-model test: hundreds of millions of elements per layer would take
// minutes on the host. Same bounds and sums as testing::gelu_epilogue_error.
#pragma once

#include "core/tensor.h"
#include "gelu_epilogue_contract.h"

namespace s3d::testing {

// u, ref, fused: bf16 CUDA tensors of the same shape (fc1's u, the reference GELU, the epilogue).
EpilogueError gelu_epilogue_error_gpu(const Tensor& u, const Tensor& ref, const Tensor& fused);

}  // namespace s3d::testing
