// Fallback counters (core/fallback.h) as JSON, for result files: here, below every layer
// that writes or reads them (contract, the bench).
#pragma once

#include <string>
#include <vector>

#include "core/fallback.h"
#include "io/json.h"

namespace s3d::io {

Json fallbacks_to_json(const std::vector<FallbackCount>& counts);
// Throws naming the known flags when an entry's optimization is not a flag.
std::vector<FallbackCount> fallbacks_from_json(const Json& j, const std::string& what);

}  // namespace s3d::io
