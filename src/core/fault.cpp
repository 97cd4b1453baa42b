#include "core/fault.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace s3d::fault {
namespace {

struct State {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> target{0};  // 0: disarmed
};

State g_state[kPointCount];
std::once_flag g_env_once;

// The environment is read once, before the first counted operation of any point.
void read_environment() {
  for (int i = 0; i < kPointCount; ++i) {
    const char* v = std::getenv(env_var(static_cast<Point>(i)));
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    // A typo must not silently disarm the test that set it, nor a number past 2^64 - 1 become
    // 2^64 - 1 (strtoull's ERANGE), nor a sign or blank that strtoull skips be read as digits.
    S3D_CHECK(end != nullptr && *end == '\0' && v[0] >= '0' && v[0] <= '9' && errno != ERANGE,
              env_var(static_cast<Point>(i)), " is '", v,
              "'; expected a non-negative integer below 2^64 (the operation to fail)");
    g_state[i].target = n;
  }
}

State& state(Point p) {
  std::call_once(g_env_once, read_environment);
  return g_state[static_cast<int>(p)];
}

}  // namespace

const char* name(Point p) {
  switch (p) {
    case Point::FileWrite: return "file write";
    case Point::HostAlloc: return "host allocation";
    case Point::DeviceAlloc: return "device allocation";
    case Point::PlanBuild: return "library plan build";
  }
  return "?";
}

const char* env_var(Point p) {
  switch (p) {
    case Point::FileWrite: return "SPARSE3D_FAULT_WRITE";
    case Point::HostAlloc: return "SPARSE3D_FAULT_HOST_ALLOC";
    case Point::DeviceAlloc: return "SPARSE3D_FAULT_DEVICE_ALLOC";
    case Point::PlanBuild: return "SPARSE3D_FAULT_PLAN_BUILD";
  }
  return "?";
}

bool hit(Point p) {
  State& s = state(p);
  const uint64_t target = s.target.load(std::memory_order_relaxed);
  const uint64_t n = s.count.fetch_add(1, std::memory_order_relaxed) + 1;
  return target != 0 && n == target;
}

void arm(Point p, uint64_t n) {
  State& s = state(p);
  s.target = n;
  s.count = 0;
}

uint64_t count(Point p) { return state(p).count.load(); }

}  // namespace s3d::fault
