// The row comparison kernels' CPU reference (src/kernels/row_match.h): several wanted rows at
// once, each in its own slot; slots accumulate; signed zeros and NaN payloads are different
// bits; bad arguments are refused by name. The planted-difference cases run on both backends
// (the GPU against this reference) in tests/device/test_row_match.cpp.
#include <gtest/gtest.h>

#include <limits>

#include "../row_match_cases.h"

namespace s3d::kernels {
namespace {

TEST(RowMatchCpu, EachWantedRowGetsItsOwnSlot) {
  // Wanted rows 0..9: row k differs from the data at column k only (k < cols), row 9 equals it.
  const int64_t R = 37, C = 24, K = 10;
  Tensor want = testing::random_tensor({1, C}, DType::BF16, 3);
  Tensor rows = Tensor::empty({R, C}, DType::BF16, Device::CPU);
  broadcast_row(want, rows);
  Tensor wants = Tensor::empty({K, C}, DType::BF16, Device::CPU);
  broadcast_row(want, wants);
  for (int64_t k = 0; k + 1 < K; ++k) wants.data_as<uint16_t>()[k * C + k] ^= 0x8000u;
  Tensor slots = mismatch_slots(K + 1, Device::CPU);
  first_row_mismatch(RowView::of(rows), RowView::of(wants), slots, 1);
  EXPECT_FALSE(read_mismatch(slots, 0, C).found());  // a slot not asked about stays empty
  for (int64_t k = 0; k < K; ++k) {
    const Mismatch m = read_mismatch(slots, k + 1, C);
    if (k + 1 == K) {
      EXPECT_FALSE(m.found());
      continue;
    }
    EXPECT_EQ(m.row, 0);
    EXPECT_EQ(m.column, k);
  }
}

TEST(RowMatchCpu, ASlotKeepsTheEarliestOfSeveralCalls) {
  const int64_t C = 8;
  Tensor a = testing::random_tensor({5, C}, DType::BF16, 4);
  Tensor b = testing::copy_of(a), c = testing::copy_of(a);
  b.data_as<uint16_t>()[3 * C + 2] ^= 1u;  // row 3
  c.data_as<uint16_t>()[1 * C + 6] ^= 1u;  // row 1: earlier
  Tensor slots = mismatch_slots(1, Device::CPU);
  first_mismatch(RowView::of(a), RowView::of(b), slots, 0);
  EXPECT_EQ(read_mismatch(slots, 0, C).row, 3);
  first_mismatch(RowView::of(a), RowView::of(c), slots, 0);
  EXPECT_EQ(read_mismatch(slots, 0, C).row, 1);
  first_mismatch(RowView::of(a), RowView::of(b), slots, 0);
  EXPECT_EQ(read_mismatch(slots, 0, C).row, 1);
  EXPECT_EQ(read_mismatch(slots, 0, C).column, 6);
}

TEST(RowMatchCpu, SignedZeroAndNanPayloadsAreDifferentBits) {
  Tensor a = Tensor::from_floats({0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()}, {1, 3},
                                 DType::BF16);
  Tensor b = testing::copy_of(a);
  b.data_as<uint16_t>()[0] = 0x8000u;  // -0
  Tensor slots = mismatch_slots(2, Device::CPU);
  first_mismatch(RowView::of(a), RowView::of(b), slots, 0);
  EXPECT_EQ(read_mismatch(slots, 0, 3).column, 0);
  Tensor c = testing::copy_of(a);
  c.data_as<uint16_t>()[2] ^= 0x0001u;  // another NaN payload
  first_mismatch(RowView::of(a), RowView::of(c), slots, 1);
  EXPECT_EQ(read_mismatch(slots, 1, 3).column, 2);
}

TEST(RowMatchCpu, BadArgumentsAreRefusedByName) {
  Tensor a = testing::random_tensor({3, 8}, DType::BF16, 5);
  Tensor f = testing::random_tensor({3, 8}, DType::F32, 5);
  Tensor slots = mismatch_slots(2, Device::CPU);
  auto refused = [](auto fn, const std::string& what) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "not refused: " << what;
  };
  refused([&] { first_mismatch(RowView::of(f), RowView::of(a), slots, 0); }, "a must be bf16");
  refused([&] { first_mismatch(RowView::of(a), RowView::of(a.rows(0, 2)), slots, 0); },
          "a is [3, 8], b is [2, 8]");
  refused([&] { first_mismatch(RowView::of(a), RowView::of(a), slots, 2); }, "outside the table");
  refused([&] { first_row_mismatch(RowView::of(a), RowView::of(a), slots, 0); },
          "outside the table");  // 3 wanted rows, 2 slots
  Tensor wrong = Tensor::empty({2, 3}, DType::I32, Device::CPU);
  refused([&] { first_mismatch(RowView::of(a), RowView::of(a), wrong, 0); }, "i32 [slots, 2]");
  refused([&] { mismatch_slots(0, Device::CPU); }, "at least one slot");
}

}  // namespace
}  // namespace s3d::kernels
