// Linear layers through cuBLASLt (GPU) or a plain loop (CPU): y = x W^T + b for
// x [M, K], W [N, K] (PyTorch's weight layout), b [N], y [M, N]. All bf16 (fp32
// accumulation, bias added in fp32 in the epilogue, one rounding at the store, as
// PyTorch's addmm) or all f32 (fp32 math, no TF32, as PyTorch's default). Algorithms are
// chosen once per (M, N, K, dtype, epilogue) and cached; the workspace is preallocated.
// With `search.on` (the op table's `linear` row, candidate tuned_gemm: src/ops/linear.cpp),
// the algorithm is the fastest of the heuristic's candidates, timed on the first call of each
// key and kept in `search.store`; no effect on the CPU.
#pragma once

#include "core/plan_search.h"
#include "core/tensor.h"

namespace s3d::gemm {

enum class Epilogue { None, Bias, BiasGelu };

// bias may be null (then the epilogue must be None). M may be 0.
// A searched call requires y to overlap none of x, weight and bias (the search runs the
// product into y many times): the row's support rule checks it.
void linear(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y,
            Epilogue epilogue = Epilogue::Bias, plan_search::Search search = {});
// Whether y's bytes overlap those of x, weight or bias (a searched call refuses them).
bool output_overlaps_input(const Tensor& x, const Tensor& weight, const Tensor* bias,
                           const Tensor& y);

// Frees the cuBLASLt handles, cached plans and workspaces (the next call makes new ones):
// for a clean shutdown, e.g. before compute-sanitizer's leak check or to hand memory back.
void release_resources();
// Returns the current context's cuBLASLt workspaces to its allocator and keeps the handles
// and plans: an engine between requests holds no workspace (the next GEMM takes one again).
// Never while a CUDA graph that captured them may replay. Bytes returned.
size_t release_workspaces();

// The cuBLASLt version string ("13.1.0"), or "none" without a GPU.
std::string cublaslt_version();

}  // namespace s3d::gemm
