// Sub-stage times for measuring the export on a machine where a profiler is not at hand:
// with SPARSE3D_MESH_TIMINGS=1 in the environment, each mark() prints one line to stderr
// ("timing: <scope>: <what> <seconds since the last mark>"); otherwise it costs a branch.
// docs/EXPORT.md, "Measuring".
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace s3d::mesh {

class SubTimer {
 public:
  explicit SubTimer(const char* scope)
      : scope_(scope), on_(enabled()), last_(std::chrono::steady_clock::now()) {}
  void mark(const char* what) { mark(what, -1); }
  // The same, with a count of what the sub-stage left ("(490767 faces)"), when `count` >= 0.
  void mark(const char* what, long long count, const char* unit = "faces") {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    if (count >= 0) {
      std::fprintf(stderr, "timing: %s: %s %.3f s (%lld %s)\n", scope_, what, s, count, unit);
    } else {
      std::fprintf(stderr, "timing: %s: %s %.3f s\n", scope_, what, s);
    }
    last_ = now;
  }

 private:
  static bool enabled() {
    static const bool on = [] {
      const char* v = std::getenv("SPARSE3D_MESH_TIMINGS");
      return v != nullptr && v[0] != '\0' && v[0] != '0';
    }();
    return on;
  }
  const char* scope_;
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace s3d::mesh
