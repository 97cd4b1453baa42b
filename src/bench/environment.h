// What a bench result records about when and where it was measured.
#pragma once

#include <string>

#include "io/json.h"
#include "sparse3d/engine.h"

namespace s3d::bench {

// Now, ISO 8601 in UTC: "2026-11-30T08:30:59Z".
std::string utc_now();

// The engine's fingerprint (Engine::fingerprint) as the JSON object result files carry:
// the engine gives every value as text, so the booleans and integers it wrote out become
// JSON booleans and numbers again (versions such as "13.0" stay strings).
io::Json fingerprint_json(const sparse3d::Engine& engine);
io::Json fingerprint_json(const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace s3d::bench
