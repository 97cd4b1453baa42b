// draw_noise() (include/sparse3d/engine.h): a draw it cannot make is refused at once, before
// any allocation, with one line naming what was wrong: more elements than it draws at once,
// more than the host has, a range running past the end of the seed's stream.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "sparse3d/sparse3d.h"

namespace {

// The message of the Error draw_noise(...) throws, checked to come in well under a second.
template <class F>
std::string refusal(F draw) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    draw();
  } catch (const sparse3d::Error& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 0.2) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

}  // namespace

TEST(DrawNoise, MoreElementsThanItDrawsAtOnceIsRefusedAtOnce) {
  // 2^31 x 2 would be 16 GiB of f32: refused, not allocated.
  std::string m = refusal([] { sparse3d::draw_noise(1, int64_t(1) << 31, 2); });
  EXPECT_EQ(m, "draw_noise: rows x cols (2147483648 x 2) is more than 2147483647 elements (the "
               "most it draws at once)");
  m = refusal([] { sparse3d::draw_noise(1, int64_t(1) << 40, int64_t(1) << 40); });
  EXPECT_NE(m.find("rows x cols (1099511627776 x 1099511627776) is more than"), std::string::npos) << m;
  m = refusal([] { sparse3d::draw_noise(1, 2, std::numeric_limits<int64_t>::max()); });
  EXPECT_NE(m.find("is more than 2147483647 elements"), std::string::npos) << m;
  m = refusal([] { sparse3d::draw_noise(1, -1, 4); });
  EXPECT_NE(m.find("negative dimension"), std::string::npos) << m;
}

TEST(DrawNoise, ARangePastTheEndOfTheStreamIsRefused) {
  const uint64_t end = uint64_t(1) << 63;
  std::string m = refusal([] { sparse3d::draw_noise(1, 4, 8, std::numeric_limits<uint64_t>::max()); });
  EXPECT_EQ(m, "draw_noise: offset 18446744073709551615 + 32 elements (rows x cols) ends past "
               "element 2^63 of the seed's stream");
  m = refusal([&] { sparse3d::draw_noise(1, 4, 8, end - 31); });
  EXPECT_NE(m.find("ends past element 2^63"), std::string::npos) << m;
  // Up to the end is a draw, and the same values as a longer draw's tail.
  const sparse3d::Array last = sparse3d::draw_noise(1, 4, 8, end - 32);
  ASSERT_EQ(last.view.numel(), 32);
  const sparse3d::Array longer = sparse3d::draw_noise(1, 5, 8, end - 40);
  EXPECT_EQ(std::memcmp(static_cast<const float*>(longer.view.data) + 8, last.view.data,
                        last.view.nbytes()),
            0);
  // An empty draw at the very end reads nothing.
  EXPECT_EQ(sparse3d::draw_noise(1, 0, 8, end).view.numel(), 0);
}

TEST(DrawNoise, DrawsUpToTheCapAreUnchanged) {
  const sparse3d::Array a = sparse3d::draw_noise(5, 8, 4);
  const sparse3d::Array b = sparse3d::draw_noise(5, 8, 4);
  ASSERT_EQ(a.view.numel(), 32);
  EXPECT_EQ(std::memcmp(a.view.data, b.view.data, a.view.nbytes()), 0);
  EXPECT_EQ(sparse3d::draw_noise(5, 4, 0).view.numel(), 0);
}
