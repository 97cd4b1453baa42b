#include "core/cuda_util.h"

#include <unordered_map>

#include "core/profiler.h"

namespace s3d {
namespace {

cudaStream_t g_stream = nullptr;
// Keyed by the op's string literal: one pointer compare per launch in the hot path.
std::unordered_map<const char*, uint64_t> g_launches;
uint64_t g_total = 0;
thread_local int t_uncounted = 0;  // UncountedLaunches depth

}  // namespace

bool cuda_available() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

cudaStream_t current_stream() { return g_stream; }
void set_current_stream(cudaStream_t stream) { g_stream = stream; }

void synchronize() { S3D_CUDA_CHECK(cudaStreamSynchronize(g_stream)); }

void after_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail("CUDA kernel launch of ", op, " failed: ", cudaGetErrorName(err), " (",
         cudaGetErrorString(err), ")");
  if (t_uncounted > 0) return;
  ++g_launches[op];
  ++g_total;
  profiler::on_launch(op);
}

void count_library_call(const char* op) {
  if (t_uncounted > 0) return;
  ++g_launches[op];
  ++g_total;
  profiler::on_launch(op);
}

UncountedLaunches::UncountedLaunches() { ++t_uncounted; }
UncountedLaunches::~UncountedLaunches() { --t_uncounted; }

LaunchCounts launch_counts() {
  LaunchCounts c;
  c.total = g_total;
  for (auto& [op, n] : g_launches) c.by_op[op] += n;
  return c;
}

void reset_launch_counts() {
  g_launches.clear();
  g_total = 0;
}

}  // namespace s3d
