// Fallback counters as reports: the counting itself is in core/fallback.h (every layer
// counts there); this is their text and JSON form for `run`, `bench` and result files.
#pragma once

#include <string>
#include <vector>

#include "core/fallback.h"
#include "io/json.h"

namespace s3d::contract {

using s3d::FallbackCount;
using s3d::fallback_counts;
using s3d::record_fallback;
using s3d::reset_fallbacks;

// "  null_context_cache: no candidate M ... (3x)" per counter, or "  none"; for run and bench.
std::string format_fallbacks(const std::vector<FallbackCount>& counts);

io::Json fallbacks_to_json(const std::vector<FallbackCount>& counts);
// Throws naming the known flags when an entry's optimization is not a flag.
std::vector<FallbackCount> fallbacks_from_json(const io::Json& j, const std::string& what);

}  // namespace s3d::contract
