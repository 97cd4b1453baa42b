// CUDA launchers of the elementwise ops (elementwise.cu). Called by elementwise.cpp after
// it has validated every argument; they launch on current_stream() and never synchronise.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace s3d::kernels::cuda {

void cast(const Tensor& x, Tensor& out);
// b_period == 0: b has a's shape; otherwise b is one row of b_period elements, repeated.
void add(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out);
void mul(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out);
void add_scalar(const RowView& x, float s, Tensor& out);
void gather_rows(const RowView& src, const Tensor& index, Tensor& out);
void copy_rows(const RowView& src, RowView& dst);
void broadcast_row(const Tensor& row, Tensor& out);
void silu(const Tensor& x, Tensor& out);
void gelu_tanh(const Tensor& x, Tensor& out);

}  // namespace s3d::kernels::cuda
