// What the two in-place q/k kernel families share (the bitwise one, qk_rmsnorm.cpp, and the
// tolerance one, fast_norm.cpp): the entry points' checks and dispatch. A family supplies its
// support rule and its CPU and CUDA versions, which take the same operands.
#pragma once

#include <functional>
#include <string>

#include "core/tensor.h"

namespace s3d::kernels::detail {

// A family's kernels: `slots` C-wide slots (C = heads * head_dim) at the start of each row of
// x (row_stride elements apart) normalised (gamma[s] non-null) and/or rotated (cos non-null)
// in place, scale = sqrt(head_dim).
struct QkKernels {
  // Why the kernel cannot take x (rows of row_stride) with these operands, or "".
  std::function<std::string(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                            const Tensor* gamma0, const Tensor* gamma1, const Tensor* cos,
                            const Tensor* sin)>
      unsupported;
  void (*cpu)(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
              const float* const* gamma, float scale, const float* cos, const float* sin);
  void (*cuda)(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
               const float* gamma0, const float* gamma1, float scale, const float* cos,
               const float* sin);
};

// q and k of the packed qkv bf16 [T, 3 * H * D] normalised and/or rotated in place (the
// first two slots of each row; v untouched), after the operand checks (messages name `op`)
// and the rule (a refused shape throws).
void qk_packed_inplace(const char* op, const QkKernels& k, Tensor& qkv, int heads, int head_dim,
                       const Tensor* q_gamma, const Tensor* k_gamma, const Tensor* cos,
                       const Tensor* sin);

// x bf16 [T, H * D] normalised per head in place (one slot, no RoPE), as above.
void qk_heads_inplace(const char* op, const QkKernels& k, Tensor& x, const Tensor& gamma,
                      int heads, int head_dim);

}  // namespace s3d::kernels::detail
