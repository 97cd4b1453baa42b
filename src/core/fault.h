// Fault injection (docs/RELIABILITY.md): a test hook that makes the N-th operation of one kind
// fail the way the real failure would, so that every failure path of a request can be walked
// (N = 1, 2, ... until the request succeeds) and checked to end in one clean error or a
// counted fallback, with nothing leaked and no partial file.
//
// Each point is armed by its environment variable (read once, at the first operation of
// that kind) or by arm() from a test. Counting is per process and thread-safe.
#pragma once

#include <cstdint>

namespace s3d::fault {

enum class Point : uint8_t {
  FileWrite,     // SPARSE3D_FAULT_WRITE: each AtomicFile write() and commit() (ENOSPC)
  HostAlloc,     // SPARSE3D_FAULT_HOST_ALLOC: host tensors and pinned staging buffers
  DeviceAlloc,   // SPARSE3D_FAULT_DEVICE_ALLOC: every DeviceAllocator::allocate() call
  PlanBuild,     // SPARSE3D_FAULT_PLAN_BUILD: each cuBLASLt plan and cuDNN graph build
};
inline constexpr int kPointCount = 4;

// "file write", "host allocation", ...: for messages.
const char* name(Point p);
// The environment variable that arms `p`.
const char* env_var(Point p);

// Counts one operation at `p`; true when it is the armed one (the caller then fails it,
// saying "(injected fault)").
bool hit(Point p);

// Arms `p` to fail its n-th operation counted from now (0: disarmed) and restarts its count.
// Overrides the environment variable.
void arm(Point p, uint64_t n);
// Operations counted at `p` since the process began or the last arm().
uint64_t count(Point p);

}  // namespace s3d::fault
