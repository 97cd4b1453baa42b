#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"

namespace s3d {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Values computed independently with Python integers and math (docs/FORMATS.md).
TEST(Rng, MatchesIndependentPythonValues) {
  struct Case { uint64_t seed, index; uint32_t bits; };
  const Case cases[] = {{0, 0, 0xbf1ffa96u}, {0, 1, 0x3f2e4aa2u}, {7, 2, 0x3fe27b28u},
                        {7, 3, 0xbf93525bu}, {123456789, 1000001, 0xbe19257bu}};
  for (const Case& c : cases) {
    float v = 0;
    normal_fill(c.seed, c.index, 1, &v);
    EXPECT_EQ(bits(v), c.bits) << "seed " << c.seed << " index " << c.index << " value " << v;
  }
}

TEST(Rng, AnyRangeEqualsTheSliceOfTheWholeStream) {
  std::vector<float> all(1001), part(333);
  normal_fill(42, 0, all.size(), all.data());
  normal_fill(42, 301, part.size(), part.data());  // odd start: splits a Box-Muller pair
  for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(bits(part[i]), bits(all[301 + i])) << i;
}

TEST(Rng, MomentsAreStandardNormal) {
  std::vector<float> v(1 << 20);
  normal_fill(3, 0, v.size(), v.data());
  double mean = 0, sq = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    mean += x;
    sq += double(x) * x;
  }
  mean /= v.size();
  double var = sq / v.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5e-3);
  EXPECT_NEAR(var, 1.0, 5e-3);
}

TEST(Rng, SeedsGiveDifferentStreams) {
  std::vector<float> a(64), b(64);
  normal_fill(1, 0, 64, a.data());
  normal_fill(2, 0, 64, b.data());
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 2);
}

}  // namespace
}  // namespace s3d
