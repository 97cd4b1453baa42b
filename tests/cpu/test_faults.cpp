// Fault injection on the CPU backend (core/fault.h, docs/RELIABILITY.md): every host
// allocation of a cold request (load the tiny checkpoint, sample two assets) fails in turn
// (the sweep of tests/fault_sweep.h, which the GPU's device allocations and plan builds go
// through too). Each run must end in one sparse3d::Error naming the injected fault, or
// succeed with a counted fallback; either way nothing stays allocated once the Engine and its
// result are gone (the allocator's live counters), and a request after the failure gives the
// same bits as one that never failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/fault.h"
#include "sparse3d/sparse3d.h"
#include "../array_bytes.h"
#include "../fault_sweep.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using s3d::fault::Point;

const std::string kTiny = std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json";

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

// One run of the sweep: the request with the n-th host allocation failed.
struct HostFaultRun {
  std::string error;
  bool fell_back = false;
  std::vector<uint8_t> latent;
  uint64_t seen = 0;
};

TEST_F(Faults, EveryHostAllocationOfAColdRequestFailsCleanly) {
  auto in = s3d::testing::synthetic_inputs({37, 21}, 9, 64, 32, 5);
  bool fell_back = false;
  s3d::fault::arm(Point::HostAlloc, 0);  // restarts the count: the request's own allocations
  const std::vector<uint8_t> want = cold_request(options, in, &fell_back);
  ASSERT_FALSE(fell_back);
  const uint64_t per_request = s3d::fault::count(Point::HostAlloc);
  const s3d::HostAllocationStats baseline = s3d::host_allocation_stats();

  auto run = [&](uint64_t n) {
    HostFaultRun r;
    s3d::fault::arm(Point::HostAlloc, n);
    try {
      r.latent = cold_request(options, in, &r.fell_back);
    } catch (const sparse3d::Error& e) {
      r.error = e.what();
    }
    r.seen = s3d::fault::count(Point::HostAlloc);
    s3d::fault::arm(Point::HostAlloc, 0);
    return r;
  };
  // Nothing stays allocated once the Engine and its result are gone.
  auto no_leak = [&](uint64_t n, const HostFaultRun& r) {
    const s3d::HostAllocationStats now = s3d::host_allocation_stats();
    EXPECT_EQ(now.live_blocks, baseline.live_blocks) << "fault " << n << " leaked: " << r.error;
    EXPECT_EQ(now.live_bytes, baseline.live_bytes) << "fault " << n;
  };
  const s3d::testing::SweepCounts c = s3d::testing::sweep_faults(
      Point::HostAlloc, "out of host memory", want, per_request, run, no_leak);
  EXPECT_GT(c.tried, 50u);
  RecordProperty("injection_points", static_cast<int>(c.tried));
  RecordProperty("errors", static_cast<int>(c.errors));
  RecordProperty("fallbacks", static_cast<int>(c.fallbacks));
  std::printf("host-allocation faults: %llu points, %llu clean errors, %llu counted fallbacks\n",
              static_cast<unsigned long long>(c.tried), static_cast<unsigned long long>(c.errors),
              static_cast<unsigned long long>(c.fallbacks));
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
