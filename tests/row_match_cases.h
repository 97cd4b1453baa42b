// Cases for the row comparison kernels (src/kernels/row_match.h), for the device-parametrised
// test (tests/device/test_row_match.cpp), so that both backends answer the same questions:
// random non-zero bf16 rows of odd sizes (no tile or vector width divides them), with
// differences planted at known elements; the expected answer is the planted element first
// in row-major order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/row_match.h"
#include "test_numerics.h"

namespace s3d::testing {

struct RowMatchCase {
  int64_t rows, cols;
  // Planted differences (row, column); the first in row-major order is the expected answer.
  std::vector<std::pair<int64_t, int64_t>> planted;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + "/" + std::to_string(planted.size());
  }
};

inline std::vector<RowMatchCase> row_match_cases(bool large) {
  std::vector<RowMatchCase> v = {
      {1, 8, {}},
      {1, 8, {{0, 7}}},
      {3, 24, {{2, 0}, {1, 23}}},
      {37, 1544, {{36, 1543}}},
      {37, 1544, {{20, 5}, {20, 4}, {21, 0}}},
      {1001, 1536, {{1000, 1535}, {999, 1}}},
      {1001, 1537, {}},
  };
  if (large) {
    v.push_back({30227, 1536, {{30226, 1535}}});
    v.push_back({30227, 1536, {{17001, 3}, {29000, 0}}});
    v.push_back({60454, 1536, {}});
  }
  return v;
}

// The expected first difference of a case.
inline std::pair<int64_t, int64_t> first_planted(const RowMatchCase& c) {
  std::pair<int64_t, int64_t> best{-1, -1};
  for (const auto& p : c.planted)
    if (best.first < 0 || p < best) best = p;
  return best;
}

// A random row, the rows [rows, cols] all equal to it (on `dev`), then the planted elements
// changed on the host before the upload: rows[r, c] = want[c] + 1 bf16 ulp.
struct RowMatchData {
  Tensor want;  // bf16 [1, cols]
  Tensor rows;  // bf16 [rows, cols]
};

inline RowMatchData row_match_data(const RowMatchCase& c, uint64_t seed, Device dev) {
  RowMatchData d;
  d.want = random_tensor({1, c.cols}, DType::BF16, seed, 2.0f, 0.5f);
  Tensor host = Tensor::empty({c.rows, c.cols}, DType::BF16, Device::CPU);
  kernels::broadcast_row(d.want, host);
  auto* bits = host.data_as<uint16_t>();
  for (const auto& [r, col] : c.planted) bits[r * c.cols + col] ^= 0x0001u;
  d.rows = host.to(dev);
  d.want = d.want.to(dev);
  return d;
}

}  // namespace s3d::testing
