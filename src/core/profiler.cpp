#include "core/profiler.h"

#include <cuda_runtime.h>

#include <vector>

#include "core/cuda_util.h"

namespace s3d::profiler {
namespace {

struct Pending {
  const char* name;
  double flops;
  cudaEvent_t begin;
  cudaEvent_t end;
};

Mode g_mode = Mode::Off;
std::vector<cudaEvent_t> g_pool;  // events reused across runs
size_t g_pool_used = 0;
std::vector<Pending> g_pending;
std::map<std::string, OpTotals> g_flops_only;
cudaEvent_t g_last = nullptr;     // launches mode: the previous event

cudaEvent_t next_event() {
  if (g_pool_used == g_pool.size()) {
    cudaEvent_t e;
    S3D_CUDA_CHECK(cudaEventCreate(&e));
    g_pool.push_back(e);
  }
  return g_pool[g_pool_used++];
}

cudaEvent_t record() {
  cudaEvent_t e = next_event();
  S3D_CUDA_CHECK(cudaEventRecord(e, current_stream()));
  return e;
}

}  // namespace

void start(Mode mode) {
  g_mode = mode;
  g_pool_used = 0;
  g_pending.clear();
  g_flops_only.clear();
  g_last = mode == Mode::Launches ? record() : nullptr;
}

Mode mode() { return g_mode; }

std::map<std::string, OpTotals> stop_and_collect() {
  std::map<std::string, OpTotals> totals = g_flops_only;
  if (g_mode != Mode::Off) synchronize();
  for (const Pending& p : g_pending) {
    float ms = 0;
    S3D_CUDA_CHECK(cudaEventElapsedTime(&ms, p.begin, p.end));
    OpTotals& t = totals[p.name];
    t.calls += 1;
    t.seconds += ms * 1e-3;
    t.flops += p.flops;
  }
  g_mode = Mode::Off;
  g_pending.clear();
  g_flops_only.clear();
  g_pool_used = 0;
  return totals;
}

LibraryScope::LibraryScope(const char* category, double flops) {
  if (g_mode == Mode::Library) {
    g_pending.push_back(Pending{category, flops, record(), nullptr});
    slot_ = static_cast<int>(g_pending.size()) - 1;
  } else if (g_mode == Mode::Launches) {
    OpTotals& t = g_flops_only[category];
    t.flops += flops;
  }
}

LibraryScope::~LibraryScope() {
  if (slot_ >= 0 && g_mode == Mode::Library) g_pending[slot_].end = record();
}

void on_launch(const char* op) {
  if (g_mode != Mode::Launches) return;
  cudaEvent_t e = record();
  g_pending.push_back(Pending{op, 0.0, g_last, e});
  g_last = e;
}

}  // namespace s3d::profiler
