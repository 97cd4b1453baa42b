#include "kernels/row_match.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kernels/kernel_checks.h"
#include "kernels/row_match_cuda.h"

namespace s3d::kernels {
namespace {

constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();

uint64_t pack(int64_t index, uint16_t got, uint16_t want) {
  return (static_cast<uint64_t>(index) << 32) | (static_cast<uint64_t>(got) << 16) | want;
}

uint64_t* slot_words(Tensor& slots) { return static_cast<uint64_t*>(slots.data()); }

void check_slots(const Tensor& slots, int64_t first, int64_t count, const char* op) {
  detail::check_dtype(slots, DType::I32, op, "slots");
  S3D_CHECK(slots.ndim() == 2 && slots.size(1) == 2, op, ": slots must be i32 [slots, 2], got ",
            slots.describe());
  S3D_CHECK(first >= 0 && first + count <= slots.size(0), op, ": slots [", first, ", ",
            first + count, ") outside the table's ", slots.size(0));
}

void check_rows(const RowView& v, const char* op, const char* name) {
  detail::check_view(v, op, name);
  detail::check_dtype(v.base, DType::BF16, op, name);
}

// The element index must fit the packed word's 32 bits.
void check_extent(const RowView& a, const char* op) {
  S3D_CHECK(a.rows * a.cols < (int64_t{1} << 32), op, ": ", a.rows, " x ", a.cols,
            " elements exceed the 2^32 a comparison can index");
}

namespace cpu {

// The reference: every element in row-major order, keeping the first difference per slot.
void row_mismatch(const RowView& a, const RowView& b, bool b_is_table, uint64_t* slots) {
  const auto* pa = static_cast<const uint16_t*>(a.data());
  const auto* pb = static_cast<const uint16_t*>(b.data());
  const int64_t K = b_is_table ? b.rows : 1;
  for (int64_t k = 0; k < K; ++k) {
    uint64_t first = kNone;
    for (int64_t r = 0; r < a.rows && first == kNone; ++r) {
      const uint16_t* want = pb + (b_is_table ? k : r) * b.stride;
      for (int64_t c = 0; c < a.cols; ++c) {
        const uint16_t got = pa[r * a.stride + c];
        if (got == want[c]) continue;
        first = pack(r * a.cols + c, got, want[c]);
        break;
      }
    }
    slots[k] = std::min(slots[k], first);
  }
}

}  // namespace cpu

void dispatch(const RowView& a, const RowView& b, bool b_is_table, Tensor& slots, int64_t slot) {
  if (a.rows == 0 || a.cols == 0) return;
  if (a.device() == Device::CUDA) {
    cuda::row_mismatch(a, b, b_is_table, slot_words(slots) + slot);
  } else {
    cpu::row_mismatch(a, b, b_is_table, slot_words(slots) + slot);
  }
}

}  // namespace

std::string Mismatch::describe() const {
  if (!found()) return "no difference";
  std::ostringstream s;
  s << "row " << row << " column " << column << ": bits 0x" << std::hex << got << " vs 0x"
    << want;
  return s.str();
}

Tensor mismatch_slots(int64_t slots, Device device) {
  S3D_CHECK(slots >= 1, "mismatch_slots: need at least one slot, got ", slots);
  std::vector<int32_t> none(static_cast<size_t>(2 * slots), -1);  // all ones
  return Tensor::from_ints(none, {slots, 2}).to(device);
}

Mismatch read_mismatch(const Tensor& host_slots, int64_t slot, int64_t cols) {
  const char* op = "read_mismatch";
  check_slots(host_slots, slot, 1, op);
  S3D_CHECK(host_slots.device() == Device::CPU, op, ": the slots must be on the host, got ",
            host_slots.describe());
  S3D_CHECK(cols >= 1, op, ": cols must be >= 1, got ", cols);
  const uint64_t w = static_cast<const uint64_t*>(host_slots.data())[slot];
  Mismatch m;
  if (w == kNone) return m;
  const auto index = static_cast<int64_t>(w >> 32);
  m.row = index / cols;
  m.column = index % cols;
  m.got = static_cast<uint16_t>((w >> 16) & 0xffffu);
  m.want = static_cast<uint16_t>(w & 0xffffu);
  return m;
}

void first_row_mismatch(const RowView& rows, const RowView& wants, Tensor& slots,
                        int64_t first_slot) {
  const char* op = "first_row_mismatch";
  check_rows(rows, op, "rows");
  check_rows(wants, op, "wants");
  S3D_CHECK(wants.cols == rows.cols, op, ": wants has ", wants.cols, " columns, rows ",
            rows.cols);
  S3D_CHECK(wants.rows >= 1, op, ": no wanted row given");
  check_slots(slots, first_slot, wants.rows, op);
  detail::check_same_device(op, {{"rows", &rows.base}, {"wants", &wants.base}, {"slots", &slots}});
  check_extent(rows, op);
  dispatch(rows, wants, true, slots, first_slot);
}

void first_mismatch(const RowView& a, const RowView& b, Tensor& slots, int64_t slot) {
  const char* op = "first_mismatch";
  check_rows(a, op, "a");
  check_rows(b, op, "b");
  S3D_CHECK(a.rows == b.rows && a.cols == b.cols, op, ": a is [", a.rows, ", ", a.cols,
            "], b is [", b.rows, ", ", b.cols, "]");
  check_slots(slots, slot, 1, op);
  detail::check_same_device(op, {{"a", &a.base}, {"b", &b.base}, {"slots", &slots}});
  check_extent(a, op);
  dispatch(a, b, false, slots, slot);
}

}  // namespace s3d::kernels
