// Fallback counters (DESIGN.md "Numerical contracts"): every time a fast path is refused and
// a slower exact path runs instead, the counter keyed by (optimization, reason) goes up. The
// first hit of each key is logged to stderr; `run` and `bench` print the counters at the end,
// so that a fast path that silently stopped applying shows up as a line, not as a latency
// regression nobody explains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"
#include "sparse3d/flags.h"

namespace s3d::contract {

struct FallbackCount {
  std::string optimization;  // the refused flag's name (sparse3d::name), e.g. null_context_cache
  std::string reason;        // why, in words a user can act on
  uint64_t count = 0;
};

// Counts one fallback of `flag`; logs "fallback: FLAG: REASON" to stderr the first time the
// key is seen in this process. Thread-safe.
void record_fallback(sparse3d::Flag flag, const std::string& reason);

// Every counter so far, sorted by (optimization, reason).
std::vector<FallbackCount> fallback_counts();

// Forgets every counter (and which keys were logged): for tests.
void reset_fallbacks();

// "  null_context_cache: no candidate M ... (3x)" per counter, or "  none"; for run and bench.
std::string format_fallbacks(const std::vector<FallbackCount>& counts);

io::Json fallbacks_to_json(const std::vector<FallbackCount>& counts);
// Throws naming the known flags when an entry's optimization is not a flag.
std::vector<FallbackCount> fallbacks_from_json(const io::Json& j, const std::string& what);

}  // namespace s3d::contract
