// Fault injection on the CPU backend (core/fault.h, docs/RELIABILITY.md): every host
// allocation of a cold request (load the tiny checkpoint, sample two assets) fails in turn.
// Each run must end in one sparse3d::Error naming the injected fault, or succeed with a
// counted fallback; either way nothing stays allocated once the Engine and its result are
// gone (the allocator's live counters), and a request after the failure gives the same
// bits as one that never failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/fault.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using s3d::fault::Point;

const std::string kTiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";

std::vector<uint8_t> bytes_of(const sparse3d::Array& a) {
  const auto* p = static_cast<const uint8_t*>(a.view.data);
  return {p, p + a.view.nbytes()};
}

struct Faults : ::testing::Test {
  void SetUp() override {
    options.device = sparse3d::DeviceChoice::CPU;
    options.persist_qualification = false;  // nothing written: the sweep is about memory
    options.qualify_m = {1, 64};
  }
  void TearDown() override {
    for (int i = 0; i < s3d::fault::kPointCount; ++i) s3d::fault::arm(static_cast<Point>(i), 0);
  }
  sparse3d::EngineOptions options;
};

// One cold request: what the sweep repeats with a fault armed. Returns the latent's bytes
// and whether a fallback was counted.
std::vector<uint8_t> cold_request(const sparse3d::EngineOptions& options,
                                  s3d::sampler::Inputs& in, bool* fell_back) {
  sparse3d::Engine engine(kTiny, options);
  const sparse3d::SampleResult result = engine.sample(s3d::testing::sample_request(in, 11, 3));
  *fell_back = !engine.counters().fallbacks.empty();
  return bytes_of(result.latent);
}

TEST_F(Faults, EveryHostAllocationOfAColdRequestFailsCleanly) {
  auto in = s3d::testing::synthetic_inputs({37, 21}, 9, 64, 32, 5);
  bool fell_back = false;
  s3d::fault::arm(Point::HostAlloc, 0);  // restarts the count: the request's own allocations
  const std::vector<uint8_t> want = cold_request(options, in, &fell_back);
  ASSERT_FALSE(fell_back);
  const uint64_t per_request = s3d::fault::count(Point::HostAlloc);
  const s3d::HostAllocationStats baseline = s3d::host_allocation_stats();

  uint64_t tried = 0, errors = 0, fallbacks = 0;
  for (uint64_t n = 1;; ++n) {
    ASSERT_LT(n, 100000u) << "the sweep does not end";
    s3d::fault::arm(Point::HostAlloc, n);
    std::string message;
    std::vector<uint8_t> got;
    try {
      got = cold_request(options, in, &fell_back);
    } catch (const sparse3d::Error& e) {
      message = e.what();
    }
    const uint64_t seen = s3d::fault::count(Point::HostAlloc);
    s3d::fault::arm(Point::HostAlloc, 0);
    const s3d::HostAllocationStats now = s3d::host_allocation_stats();
    EXPECT_EQ(now.live_blocks, baseline.live_blocks) << "fault " << n << " leaked: " << message;
    EXPECT_EQ(now.live_bytes, baseline.live_bytes) << "fault " << n;
    if (seen < n) {  // the request ran past its last allocation: the sweep is complete
      EXPECT_TRUE(message.empty()) << message;
      EXPECT_EQ(got, want);
      break;
    }
    ++tried;
    if (message.empty()) {
      // It survived the fault: only through a counted fallback.
      EXPECT_TRUE(fell_back) << "fault " << n << " was absorbed silently";
      ++fallbacks;
    } else {
      ++errors;
      EXPECT_NE(message.find("out of host memory"), std::string::npos) << n << ": " << message;
      EXPECT_NE(message.find("(injected fault"), std::string::npos) << n << ": " << message;
    }
  }
  EXPECT_EQ(tried, per_request) << "every allocation of the request was failed once";
  EXPECT_GT(tried, 50u);
  RecordProperty("injection_points", static_cast<int>(tried));
  RecordProperty("errors", static_cast<int>(errors));
  RecordProperty("fallbacks", static_cast<int>(fallbacks));
  std::printf("host-allocation faults: %llu points, %llu clean errors, %llu counted fallbacks\n",
              static_cast<unsigned long long>(tried), static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(fallbacks));
  // And after all that, a request that never failed gives the same bits.
  EXPECT_EQ(cold_request(options, in, &fell_back), want);
}

// A request that fails leaves nothing behind in the Engine either: after a failed request
// and a good one, the Engine holds what an Engine holds after one good request, and gives
// the same bits (the engine's caches are built whole or not at all).
TEST_F(Faults, AFailedRequestLeavesTheEngineAsAGoodOneWould) {
  auto in = s3d::testing::synthetic_inputs({37, 21}, 9, 64, 32, 5);
  const sparse3d::SampleRequest r = s3d::testing::sample_request(in, 11, 3);
  auto held_after = [&](uint64_t fault, std::vector<uint8_t>* latent) {
    sparse3d::Engine engine(kTiny, options);
    s3d::fault::arm(Point::HostAlloc, fault);
    try {
      engine.sample(r);
    } catch (const sparse3d::Error&) {
    }
    const uint64_t seen = s3d::fault::count(Point::HostAlloc);
    s3d::fault::arm(Point::HostAlloc, 0);
    {
      const sparse3d::SampleResult good = engine.sample(r);
      *latent = bytes_of(good.latent);
    }
    const s3d::HostAllocationStats held = s3d::host_allocation_stats();
    return std::make_pair(held, seen);
  };
  std::vector<uint8_t> want, got;
  // One good request first, then the same good request: what a clean Engine holds after two.
  const auto [clean, per_request] = held_after(0, &want);
  for (uint64_t n = 1; n <= per_request; ++n) {
    const auto [held, seen] = held_after(n, &got);
    ASSERT_GE(seen, n);
    EXPECT_EQ(got, want) << "after fault " << n;
    EXPECT_EQ(held.live_blocks, clean.live_blocks) << "after fault " << n;
    EXPECT_EQ(held.live_bytes, clean.live_bytes) << "after fault " << n;
    if (HasFailure()) break;
  }
}

// arm() picks the n-th operation from now and restarts the count; 0 disarms.
TEST_F(Faults, ArmingTakesEffectAndCountsRestart) {
  s3d::fault::arm(Point::FileWrite, 2);
  EXPECT_FALSE(s3d::fault::hit(Point::FileWrite));
  EXPECT_TRUE(s3d::fault::hit(Point::FileWrite));
  EXPECT_FALSE(s3d::fault::hit(Point::FileWrite));
  EXPECT_EQ(s3d::fault::count(Point::FileWrite), 3u);
  s3d::fault::arm(Point::FileWrite, 0);
  EXPECT_EQ(s3d::fault::count(Point::FileWrite), 0u);
  EXPECT_FALSE(s3d::fault::hit(Point::FileWrite));
}

}  // namespace
