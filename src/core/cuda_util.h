// CUDA plumbing shared by every layer: error checks that throw s3d::Error, the engine's
// current stream, device discovery, and the launch counter that `bench` and `profile` read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/error.h"

#define S3D_CUDA_CHECK(expr)                                                         \
  do {                                                                               \
    cudaError_t s3d_err_ = (expr);                                                   \
    if (s3d_err_ != cudaSuccess)                                                     \
      ::s3d::fail("CUDA error ", cudaGetErrorName(s3d_err_), " (",                   \
                  cudaGetErrorString(s3d_err_), ") in ", #expr, " at ", __FILE__, ":", \
                  __LINE__);                                                         \
  } while (0)

namespace s3d {

// True when a CUDA device is present and usable; never throws.
bool cuda_available();
// The CUDA devices this process can see; 0 without a driver or device (never throws).
int cuda_device_count();

// The stream every engine kernel and library call runs on: the current context's
// (core/context.h); the process default context uses the legacy stream 0.
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Blocks the host until the current stream is done (for tests, timing and output only).
void synchronize();

// Every kernel launch goes through here after the <<<>>> call: checks the launch error
// and counts it under `op` (a string literal naming the op, e.g. "layer_norm").
void after_launch(const char* op);

// The current context's launch counts.
struct LaunchCounts {
  uint64_t total = 0;
  std::map<std::string, uint64_t> by_op;
};
LaunchCounts launch_counts();
void reset_launch_counts();
// Library calls (cuBLASLt, cuDNN) are counted too, under their own names.
void count_library_call(const char* op);
// Called before a library kernel writes [ptr, ptr + bytes). With
// SPARSE3D_CLEAR_LIBRARY_OUTPUTS=1 in the environment (read once), the range is first
// cleared by cudaMemsetAsync: compute-sanitizer's initcheck does not see the stores of the
// Hopper library kernels (bulk TMA stores, and any kernel a filter leaves uninstrumented),
// so without this every later read of their output is reported as uninitialised
// (docs/RELIABILITY.md). Unset (the default): nothing, one branch.
void before_library_write(void* ptr, size_t bytes);
// While a CUDA graph is being captured nothing runs: its launches are not counted (the
// replay counts once, as "cuda_graph"). Nests; this thread only.
class UncountedLaunches {
 public:
  UncountedLaunches();
  ~UncountedLaunches();
  UncountedLaunches(const UncountedLaunches&) = delete;
  UncountedLaunches& operator=(const UncountedLaunches&) = delete;
};

// Grid size for a 1-D launch over n items with `block` threads each.
inline unsigned grid_for(int64_t n, int block) {
  return static_cast<unsigned>((n + block - 1) / block);
}

}  // namespace s3d
