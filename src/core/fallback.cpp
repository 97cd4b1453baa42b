#include "core/fallback.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "core/context.h"
#include "core/error.h"

namespace s3d {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, uint64_t> counts;
};

Registry& registry() { return current_context().state<Registry>(); }

}  // namespace

void record_fallback(sparse3d::Flag flag, const std::string& reason) {
  // Keyed by the flag's name, so that the counters sort (and print) by name.
  const std::string optimization(sparse3d::name(flag));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  uint64_t& n = r.counts[{optimization, reason}];
  if (n++ == 0) {
    std::fprintf(stderr, "fallback: %s: %s\n", optimization.c_str(), reason.c_str());
    std::fflush(stderr);
  }
}

std::vector<FallbackCount> fallback_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<FallbackCount> out;
  for (const auto& [key, n] : r.counts) out.push_back(FallbackCount{key.first, key.second, n});
  return out;
}

void reset_fallbacks() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.counts.clear();
}

std::string format_fallbacks(const std::vector<FallbackCount>& counts) {
  if (counts.empty()) return "  none\n";
  std::string s;
  for (const auto& c : counts)
    s += cat("  ", c.optimization, ": ", c.reason, " (", c.count, "x)\n");
  return s;
}

}  // namespace s3d
