// Fallback counters (docs/CONTRACTS.md): every time a fast path is refused and a slower exact
// path runs instead, the counter keyed by (flag, reason) of the current context (one per
// Engine, core/context.h) goes up. The first hit of each key is logged to stderr; `run` and
// `bench` print the counters at the end, so that a fast path that silently stopped applying
// shows up as a line, not as a latency regression nobody explains. In core so that every
// layer that can refuse a fast path (kernels, gemm, model, sampler) counts it the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparse3d/flags.h"

namespace s3d {

struct FallbackCount {
  std::string optimization;  // the refused flag's name (sparse3d::name), e.g. null_context_cache
  std::string reason;        // why, in words a user can act on
  uint64_t count = 0;
};

// Counts one fallback of `flag`; logs "fallback: FLAG: REASON" to stderr the first time the
// key is seen in the current context. Thread-safe.
void record_fallback(sparse3d::Flag flag, const std::string& reason);

// The current context's counters so far, sorted by (optimization, reason).
std::vector<FallbackCount> fallback_counts();

// Forgets the current context's counters (and which keys were logged).
void reset_fallbacks();

}  // namespace s3d
