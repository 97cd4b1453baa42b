// The row comparison kernels on the GPU (src/kernels/row_match.h) against their CPU reference
// on the same cases (tests/row_match_cases.h), up to 60,454 rows of 1,536 (the batched-CFG
// reference at 30,227 tokens): the same slot words, bit for bit. Slots start at "no
// difference", so a comparison that never ran fails every case with a planted difference.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "row_match_cases.h"

namespace s3d::kernels {
namespace {

using testing::first_planted;
using testing::row_match_cases;
using testing::row_match_data;

// The slot table as the words it holds.
std::vector<uint64_t> words(const Tensor& slots) {
  Tensor h = slots.to(Device::CPU);
  const auto* p = static_cast<const uint64_t*>(h.data());
  return std::vector<uint64_t>(p, p + h.size(0));
}

TEST(RowMatchGpu, SameAnswersAsTheCpuReference) {
  S3D_REQUIRE_CUDA();
  for (const auto& c : row_match_cases(true)) {
    const auto host = row_match_data(c, 11 + c.rows, Device::CPU);
    const auto gpu = row_match_data(c, 11 + c.rows, Device::CUDA);
    // Nine wanted rows (more than one launch's eight): the true row, then eight that each
    // differ from it at one column.
    const int64_t K = 9;
    auto table = [&, c = c](Device dev) {
      Tensor t = Tensor::empty({K, c.cols}, DType::BF16, Device::CPU);
      broadcast_row(host.want, t);
      for (int64_t k = 1; k < K; ++k) t.data_as<uint16_t>()[k * c.cols + (k * 5) % c.cols] ^= 0x4000u;
      return t.to(dev);
    };
    Tensor cpu_slots = mismatch_slots(K + 1, Device::CPU);
    Tensor gpu_slots = mismatch_slots(K + 1, Device::CUDA);
    first_row_mismatch(RowView::of(host.rows), RowView::of(table(Device::CPU)), cpu_slots, 0);
    first_row_mismatch(RowView::of(gpu.rows), RowView::of(table(Device::CUDA)), gpu_slots, 0);
    Tensor ref_cpu = Tensor::empty(host.rows.shape(), DType::BF16, Device::CPU);
    broadcast_row(host.want, ref_cpu);
    Tensor ref_gpu = ref_cpu.to(Device::CUDA);
    first_mismatch(RowView::of(host.rows), RowView::of(ref_cpu), cpu_slots, K);
    first_mismatch(RowView::of(gpu.rows), RowView::of(ref_gpu), gpu_slots, K);
    EXPECT_EQ(words(gpu_slots), words(cpu_slots)) << c.name();
    const auto [r, col] = first_planted(c);
    const Mismatch m = read_mismatch(gpu_slots.to(Device::CPU), K, c.cols);
    EXPECT_EQ(m.row, r) << c.name();
    EXPECT_EQ(m.column, col) << c.name();
  }
}

TEST(RowMatchGpu, EveryElementDifferingReportsTheFirst) {
  S3D_REQUIRE_CUDA();
  // Random rows against a random row: nearly every element differs, so every warp has a
  // candidate; the earliest one wins whatever order the blocks ran in.
  const int64_t R = 30227, C = 1536;
  Tensor a = testing::random_tensor({R, C}, DType::BF16, 21);
  Tensor w = testing::random_tensor({1, C}, DType::BF16, 22);
  Tensor cpu_slots = mismatch_slots(1, Device::CPU);
  first_row_mismatch(RowView::of(a), RowView::of(w), cpu_slots, 0);
  Tensor gpu_slots = mismatch_slots(1, Device::CUDA);
  first_row_mismatch(RowView::of(a.to(Device::CUDA)), RowView::of(w.to(Device::CUDA)), gpu_slots, 0);
  EXPECT_EQ(words(gpu_slots), words(cpu_slots));
  EXPECT_EQ(read_mismatch(cpu_slots, 0, C).row, 0);
}

}  // namespace
}  // namespace s3d::kernels
