// The row comparison kernels (src/kernels/row_match.h) on the test device
// (tests/device_under_test.h), on the cases of tests/row_match_cases.h: the planted difference
// first in row-major order is the one reported, with its bits, through a table of nine wanted
// rows (more than one launch's eight) and through the pairwise comparison; random rows
// report their first element. Slots start at "no difference", so a comparison that never ran
// fails every case with a planted difference. On the GPU also: the cases up to 60,454 rows of
// 1,536 (the batched-CFG reference at 30,227 tokens), and the slot words bit for bit against
// the CPU reference's. The CPU reference's other properties (one slot per wanted row,
// accumulation, signed zeros and NaN payloads, refusals) are in tests/cpu/test_row_match.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device_under_test.h"
#include "row_match_cases.h"

namespace s3d::kernels {
namespace {

using test::kTestDevice;
using test::kTestOnCuda;
using testing::first_planted;
using testing::row_match_cases;
using testing::row_match_data;

// Nine wanted rows: the true row, then eight that each differ from it at one column.
constexpr int64_t kWanted = 9;

// The slot table as the words it holds.
std::vector<uint64_t> words(const Tensor& slots) {
  Tensor h = slots.to(Device::CPU);
  const auto* p = static_cast<const uint64_t*>(h.data());
  return std::vector<uint64_t>(p, p + h.size(0));
}

// The wanted rows of a case, on the host: row 0 is `want`, row k differs at column 5k.
Tensor wanted_rows(const Tensor& want, int64_t cols) {
  Tensor t = Tensor::empty({kWanted, cols}, DType::BF16, Device::CPU);
  broadcast_row(want, t);
  for (int64_t k = 1; k < kWanted; ++k) t.data_as<uint16_t>()[k * cols + (k * 5) % cols] ^= 0x4000u;
  return t;
}

// Both comparisons of a case on `dev`: the wanted rows into slots 0..8, the rows against the
// broadcast true row into slot 9.
Tensor compare_case(const testing::RowMatchData& d, const Tensor& want_host, Device dev) {
  const int64_t cols = d.rows.size(1);
  Tensor slots = mismatch_slots(kWanted + 1, dev);
  first_row_mismatch(RowView::of(d.rows), RowView::of(wanted_rows(want_host, cols).to(dev)), slots,
                     0);
  Tensor ref = Tensor::empty(d.rows.shape(), DType::BF16, Device::CPU);
  broadcast_row(want_host, ref);
  first_mismatch(RowView::of(d.rows), RowView::of(ref.to(dev)), slots, kWanted);
  return slots;
}

TEST(RowMatch, ReportsTheFirstPlantedDifferenceWithItsBits) {
  S3D_TEST_DEVICE();
  for (const auto& c : row_match_cases(kTestOnCuda)) {
    const auto host = row_match_data(c, 11 + c.rows, Device::CPU);
    const auto dev = row_match_data(c, 11 + c.rows, kTestDevice);
    const Tensor slots = compare_case(dev, host.want, kTestDevice).to(Device::CPU);
    const auto [r, col] = first_planted(c);
    for (int64_t s : {int64_t{0}, kWanted}) {
      const Mismatch m = read_mismatch(slots, s, c.cols);
      EXPECT_EQ(m.row, r) << c.name() << " slot " << s;
      EXPECT_EQ(m.column, col) << c.name() << " slot " << s;
      if (!m.found()) continue;
      const uint16_t want = host.want.data_as<uint16_t>()[col];
      EXPECT_EQ(m.want, want) << c.name();
      EXPECT_EQ(m.got, want ^ 0x0001u) << c.name();
      EXPECT_NE(m.describe().find("row " + std::to_string(r) + " column " + std::to_string(col)),
                std::string::npos)
          << m.describe();
    }
    if constexpr (kTestOnCuda) {  // every slot's word, against the CPU reference's
      EXPECT_EQ(words(slots), words(compare_case(host, host.want, Device::CPU))) << c.name();
    }
  }
}

TEST(RowMatch, EveryElementDifferingReportsTheFirst) {
  S3D_TEST_DEVICE();
  // Random rows against a random row: nearly every element differs, so every warp has a
  // candidate; the earliest one wins whatever order the blocks ran in. (The GPU at the
  // model's 30,227 rows; the CPU at 1,001.)
  const int64_t R = kTestOnCuda ? 30227 : 1001, C = 1536;
  Tensor a = testing::random_tensor({R, C}, DType::BF16, 21);
  Tensor w = testing::random_tensor({1, C}, DType::BF16, 22);
  Tensor slots = mismatch_slots(1, kTestDevice);
  first_row_mismatch(RowView::of(a.to(kTestDevice)), RowView::of(w.to(kTestDevice)), slots, 0);
  EXPECT_EQ(read_mismatch(slots.to(Device::CPU), 0, C).row, 0);
  if constexpr (kTestOnCuda) {
    Tensor cpu_slots = mismatch_slots(1, Device::CPU);
    first_row_mismatch(RowView::of(a), RowView::of(w), cpu_slots, 0);
    EXPECT_EQ(words(slots), words(cpu_slots));
    EXPECT_EQ(read_mismatch(cpu_slots, 0, C).row, 0);
  }
}

}  // namespace
}  // namespace s3d::kernels
