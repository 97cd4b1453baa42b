// CUDA launchers of the row comparisons (row_match.cu); called by row_match.cpp after it has
// validated every argument. They launch on current_stream() and never synchronise.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace s3d::kernels::cuda {

// b_is_table: b holds K rows, each compared with every row of a (first_row_mismatch); else
// b has a's rows and row r of a is compared with row r of b (first_mismatch).
void row_mismatch(const RowView& a, const RowView& b, bool b_is_table, uint64_t* slots);

}  // namespace s3d::kernels::cuda
