// Internal: the cuBLASLt side of gemm::linear. Inputs are already validated by linear.cpp
// (dtypes, shapes, devices, M > 0), so this file only plans and launches.
#pragma once

#include "core/tensor.h"
#include "gemm/linear.h"

namespace s3d::gemm::detail {

void linear_cublaslt(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y,
                     Epilogue epilogue, plan_search::Search search);

// Destroys every handle and plan and returns the workspaces (gemm::release_resources).
void release_cublaslt();
// Returns the workspaces to their allocator and keeps the handles and plans; the next GEMM
// takes a workspace again (gemm::release_workspaces). Bytes returned.
size_t release_cublaslt_workspaces();

}  // namespace s3d::gemm::detail
