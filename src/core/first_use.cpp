#include "core/first_use.h"

#include <mutex>

#include "core/context.h"

namespace s3d {
namespace {

struct FirstUseState {
  std::mutex mu;
  std::map<std::string, FirstUseCost> totals;
};

}  // namespace

std::map<std::string, FirstUseCost> first_use_totals() {
  FirstUseState& st = current_context().state<FirstUseState>();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.totals;
}

std::map<std::string, FirstUseCost> first_use_delta(const std::map<std::string, FirstUseCost>& before,
                                                    const std::map<std::string, FirstUseCost>& after) {
  std::map<std::string, FirstUseCost> out;
  for (const auto& [kind, now] : after) {
    const auto was = before.find(kind);
    FirstUseCost d = now;
    if (was != before.end()) {
      d.count -= was->second.count;
      d.seconds -= was->second.seconds;
    }
    if (d.count > 0) out[kind] = d;
  }
  return out;
}

FirstUseTimer::~FirstUseTimer() {
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  FirstUseState& st = current_context().state<FirstUseState>();
  std::lock_guard<std::mutex> lock(st.mu);
  FirstUseCost& c = st.totals[kind_];
  ++c.count;
  c.seconds += s;
}

}  // namespace s3d
