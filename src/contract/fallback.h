// Fallback counters as reports: the counting and the text form are in core/fallback.h
// (every layer counts there), the JSON form in io/fallback_json.h; their names here for
// `run`, `bench` and the tests.
#pragma once

#include "core/fallback.h"
#include "io/fallback_json.h"

namespace s3d::contract {

using s3d::FallbackCount;
using s3d::fallback_counts;
using s3d::format_fallbacks;
using s3d::record_fallback;
using s3d::reset_fallbacks;
using s3d::io::fallbacks_from_json;
using s3d::io::fallbacks_to_json;

}  // namespace s3d::contract
