// Work done once per new shape and kept for later requests (a cuDNN graph built for a new
// sequence-length bucket, a cuBLASLt plan for a new row count, a searched plan): counted and
// timed per kind in the current context, so that a request can say what its first-time cost
// was (RequestStats::first_use) and a benchmark can check that an unseen token count costs
// what a repeat costs. Host time: each of these is host work (plan building, heuristics) or
// synchronises (a plan search times candidates).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace s3d {

struct FirstUseCost {
  uint64_t count = 0;
  double seconds = 0;
};

// Totals by kind ("attention_graph", "gemm_plan", ...) since the current context began.
std::map<std::string, FirstUseCost> first_use_totals();
// `after` - `before`, kinds with no new work left out.
std::map<std::string, FirstUseCost> first_use_delta(const std::map<std::string, FirstUseCost>& before,
                                                    const std::map<std::string, FirstUseCost>& after);

// Times its scope as one piece of first-use work of `kind` (a string literal).
class FirstUseTimer {
 public:
  explicit FirstUseTimer(const char* kind)
      : kind_(kind), start_(std::chrono::steady_clock::now()) {}
  ~FirstUseTimer();
  FirstUseTimer(const FirstUseTimer&) = delete;
  FirstUseTimer& operator=(const FirstUseTimer&) = delete;

 private:
  const char* kind_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace s3d
