#include "core/profiler.h"

#include <cuda_runtime.h>

#include <vector>

#include "core/context.h"
#include "core/cuda_util.h"

namespace s3d {

ProfilerState::~ProfilerState() {
  for (cudaEvent_t e : pool) cudaEventDestroy(e);
}

}  // namespace s3d

namespace s3d::profiler {
namespace {

ProfilerState& state() { return current_context().profiler(); }

cudaEvent_t next_event(ProfilerState& st) {
  if (st.pool_used == st.pool.size()) {
    cudaEvent_t e;
    S3D_CUDA_CHECK(cudaEventCreate(&e));
    st.pool.push_back(e);
  }
  return st.pool[st.pool_used++];
}

cudaEvent_t record(ProfilerState& st) {
  cudaEvent_t e = next_event(st);
  S3D_CUDA_CHECK(cudaEventRecord(e, current_stream()));
  return e;
}

}  // namespace

std::unique_ptr<ProfilerState> make_state() { return std::make_unique<ProfilerState>(); }

void start(Mode mode) {
  ProfilerState& st = state();
  st.mode = mode;
  st.pool_used = 0;
  st.pending.clear();
  st.flops_only.clear();
  st.last = mode == Mode::Launches ? record(st) : nullptr;
}

Mode mode() { return state().mode; }

std::map<std::string, OpTotals> stop_and_collect() {
  ProfilerState& st = state();
  std::map<std::string, OpTotals> totals = st.flops_only;
  if (st.mode != Mode::Off) synchronize();
  for (const ProfilerState::Pending& p : st.pending) {
    float ms = 0;
    S3D_CUDA_CHECK(cudaEventElapsedTime(&ms, p.begin, p.end));
    OpTotals& t = totals[p.name];
    t.calls += 1;
    t.seconds += ms * 1e-3;
    t.flops += p.flops;
  }
  st.mode = Mode::Off;
  st.pending.clear();
  st.flops_only.clear();
  st.pool_used = 0;
  return totals;
}

LibraryScope::LibraryScope(const char* category, double flops) {
  ProfilerState& st = state();
  if (st.mode == Mode::Library) {
    st.pending.push_back(ProfilerState::Pending{category, flops, record(st), nullptr});
    slot_ = static_cast<int>(st.pending.size()) - 1;
  } else if (st.mode == Mode::Launches) {
    OpTotals& t = st.flops_only[category];
    t.flops += flops;
  }
}

LibraryScope::~LibraryScope() {
  ProfilerState& st = state();
  if (slot_ >= 0 && st.mode == Mode::Library) st.pending[slot_].end = record(st);
}

void on_launch(const char* op) {
  ProfilerState& st = state();
  if (st.mode != Mode::Launches) return;
  cudaEvent_t e = record(st);
  st.pending.push_back(ProfilerState::Pending{op, 0.0, st.last, e});
  st.last = e;
}

}  // namespace s3d::profiler
