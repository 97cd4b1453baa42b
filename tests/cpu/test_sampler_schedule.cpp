#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "sampler/sampler.h"

namespace s3d::sampler {
namespace {

TEST(Schedule, RescaledLinspaceFromOneToZero) {
  auto t = timesteps(15, 3.0);
  ASSERT_EQ(t.size(), 16u);
  EXPECT_EQ(t.front(), 1.0);
  EXPECT_EQ(t.back(), 0.0);
  for (int k = 0; k <= 15; ++k) {
    double s = 1.0 - k / 15.0;
    EXPECT_NEAR(t[k], 3.0 * s / (1.0 + 2.0 * s), 1e-15) << k;
    if (k) {
      EXPECT_LT(t[k], t[k - 1]);
    }
  }
  // r = 1 is the plain linspace.
  auto lin = timesteps(4, 1.0);
  EXPECT_DOUBLE_EQ(lin[1], 0.75);
  EXPECT_DOUBLE_EQ(lin[3], 0.25);
}

TEST(Schedule, PresetsMatchTheProtocolAndTheRelease) {
  SamplerOptions p = SamplerOptions::protocol();
  EXPECT_EQ(p.steps, 15);
  EXPECT_EQ(p.guidance, 7.5);
  EXPECT_EQ(p.rescale_t, 3.0);
  EXPECT_EQ(p.interval_lo, 0.0);
  EXPECT_EQ(p.interval_hi, 1.0);
  SamplerOptions r = SamplerOptions::released();
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.interval_lo, 0.6);
  EXPECT_EQ(r.guidance_rescale, 0.5);
}

TEST(Schedule, InvalidOptionsAreRejectedWithTheirName) {
  SamplerOptions o;
  o.steps = 0;
  EXPECT_THROW(o.validate(), Error);
  o = SamplerOptions{};
  o.interval_lo = 0.9;
  o.interval_hi = 0.1;
  try {
    o.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interval"), std::string::npos) << e.what();
  }
  o = SamplerOptions{};
  o.guidance_rescale = 1.5;
  EXPECT_THROW(o.validate(), Error);
  o = SamplerOptions{};
  o.rescale_t = NAN;
  EXPECT_THROW(o.validate(), Error);
}

}  // namespace
}  // namespace s3d::sampler
