// The fault sweep of the CPU and GPU fault tests (tests/cpu/test_faults.cpp,
// tests/gpu/test_faults_gpu.cpp; core/fault.h, docs/RELIABILITY.md): operation n = 1, 2, ...
// of one injection point in a cold request fails in turn, until a run counts fewer
// operations than n (the request ran past its last one), which must succeed with the
// reference bits. Each run before it must end in one sparse3d::Error naming the fault and
// "(injected fault", or succeed through a counted fallback; the caller adds what its backend
// can check of the run (memory left in use, later requests). Stops at the first failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/fault.h"

namespace s3d::testing {

struct SweepCounts {
  uint64_t tried = 0, errors = 0, fallbacks = 0;
};

// run(n) arms `point` at n, runs the request, disarms and returns an outcome with `error`
// (empty: it succeeded), `fell_back`, `latent` (the result's bytes) and `seen` (the point's
// operations counted while armed); check(n, outcome) is the caller's. `per_request`: the
// point's operations in a request that never failed, each of which the sweep must try.
template <class Run, class Check>
SweepCounts sweep_faults(fault::Point point, const std::string& needle,
                         const std::vector<uint8_t>& want, uint64_t per_request, Run run,
                         Check check) {
  SweepCounts c;
  for (uint64_t n = 1;; ++n) {
    if (n >= 100000) {
      ADD_FAILURE() << "the sweep does not end";
      return c;
    }
    const auto o = run(n);
    check(n, o);
    if (o.seen < n) {  // the request ran past its last operation: the sweep is complete
      EXPECT_TRUE(o.error.empty()) << o.error;
      EXPECT_EQ(o.latent, want);
      break;
    }
    ++c.tried;
    if (o.error.empty()) {  // it survived the fault: only through a counted fallback
      EXPECT_TRUE(o.fell_back) << fault::name(point) << " " << n << " absorbed silently";
      ++c.fallbacks;
    } else {
      ++c.errors;
      EXPECT_NE(o.error.find(needle), std::string::npos) << n << ": " << o.error;
      EXPECT_NE(o.error.find("(injected fault"), std::string::npos) << n << ": " << o.error;
    }
    if (::testing::Test::HasFailure()) break;  // one failure's report, not hundreds
  }
  EXPECT_EQ(c.tried, per_request) << "every operation of the request was failed once";
  return c;
}

}  // namespace s3d::testing
