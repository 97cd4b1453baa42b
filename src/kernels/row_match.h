// Bitwise row comparison on the device: the null-context qualification's question ("is every
// unconditional row of the reference projection exactly the cached row?", CONTRACTS.md)
// answered where the rows are, so that no [N, C] tensor is copied to the host. Raw 16-bit
// patterns of bf16 are compared, never values (-0 and +0 differ, NaN payloads differ).
//
// Results are packed into one 64-bit word per question and kept in a caller-owned slot
// table (an i32 tensor [slots, 2] read as unsigned 64-bit words), so that a whole
// qualification (30 blocks, several questions each) is read back with one small copy:
//   bits 63..32  the row-major element index r * cols + c of the first difference
//   bits 31..16  the bits found there, bits 15..0 the bits wanted
// and all ones when nothing differs. The smallest packed word is the first difference.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace s3d::kernels {

// A decoded slot.
struct Mismatch {
  int64_t row = -1;  // -1: no difference
  int64_t column = -1;
  uint16_t got = 0, want = 0;
  bool found() const { return row >= 0; }
  std::string describe() const;  // "row 5 column 17: bits 0x3f80 vs 0x3f81"
};

// An i32 [slots, 2] tensor on `device` with every slot at "no difference".
Tensor mismatch_slots(int64_t slots, Device device);
// Slot `slot` of a table copied to the host (Tensor::to(Device::CPU)), `cols` as compared.
Mismatch read_mismatch(const Tensor& host_slots, int64_t slot, int64_t cols);

// For each row k of `wants` (bf16 [K, C]): the first element of `rows` (bf16 [R, C]) whose
// bits differ from wants[k] at its column, min-combined into slot `first_slot + k`
// (so several calls can accumulate into one slot). R * C must be below 2^32.
void first_row_mismatch(const RowView& rows, const RowView& wants, Tensor& slots,
                        int64_t first_slot);

// The first element where a and b (bf16, the same rows and columns) differ, min-combined into
// slot `slot`; `want` in the slot is b's bits.
void first_mismatch(const RowView& a, const RowView& b, Tensor& slots, int64_t slot);

}  // namespace s3d::kernels
