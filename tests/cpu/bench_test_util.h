// Synthetic bench results for the report tests: a cell from its repeats.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/result.h"

namespace s3d::bench {

// The (path, asset) cell with these timed repeats (request seconds) and nothing else.
inline Cell timed_cell(const std::string& path, const std::string& asset,
                       std::vector<double> seconds) {
  Cell c;
  c.path = path;
  c.asset = asset;
  c.loop_seconds = std::move(seconds);
  return c;
}

}  // namespace s3d::bench
