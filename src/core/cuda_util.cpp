#include "core/cuda_util.h"

#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/context.h"
#include "core/profiler.h"

namespace s3d {
namespace {

thread_local int t_uncounted = 0;  // UncountedLaunches depth

void count(const char* op) {
  LaunchCounter& c = current_context().launches();
  ++c.by_op[op];
  ++c.total;
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

cudaStream_t current_stream() { return current_context().stream(); }
void set_current_stream(cudaStream_t stream) { current_context().set_stream(stream); }

void synchronize() { S3D_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

void after_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail("CUDA kernel launch of ", op, " failed: ", cudaGetErrorName(err), " (",
         cudaGetErrorString(err), ")");
  if (t_uncounted > 0) return;
  count(op);
  profiler::on_launch(op);
}

void count_library_call(const char* op) {
  if (t_uncounted > 0) return;
  count(op);
  profiler::on_launch(op);
}

void before_library_write(void* ptr, size_t bytes) {
  static const bool clear = [] {
    const char* v = std::getenv("SPARSE3D_CLEAR_LIBRARY_OUTPUTS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (clear) S3D_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, current_stream()));
}

UncountedLaunches::UncountedLaunches() { ++t_uncounted; }
UncountedLaunches::~UncountedLaunches() { --t_uncounted; }

LaunchCounts launch_counts() {
  const LaunchCounter& counter = current_context().launches();
  LaunchCounts c;
  c.total = counter.total;
  for (auto& [op, n] : counter.by_op) c.by_op[op] += n;
  return c;
}

void reset_launch_counts() {
  LaunchCounter& counter = current_context().launches();
  counter.by_op.clear();
  counter.total = 0;
}

}  // namespace s3d
