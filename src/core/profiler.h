// Opt-in GPU instrumentation for `sparse3d bench` and `sparse3d profile`. Off by default
// (the hot path pays one branch). Two modes:
//  - library: CUDA events around every GEMM and attention call, plus their FLOPs, so that a
//    denoise loop's GPU time splits into attention, GEMM and everything else;
//  - launches: an event after every launch (kernel or library call); the time between
//    consecutive events is charged to the later op. Exact while the GPU runs back to back
//    (the host ahead of it), an upper bound otherwise. For per-op tables of one forward.
// Events are recorded on the current stream; collect() synchronises and returns the totals.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace s3d::profiler {

enum class Mode { Off, Library, Launches };

struct OpTotals {
  uint64_t calls = 0;
  double seconds = 0;
  double flops = 0;
};

}  // namespace s3d::profiler

namespace s3d {

// One context's profiler (core/context.h): its mode, its events and what they bracket.
struct ProfilerState {
  struct Pending {
    const char* name;
    double flops;
    cudaEvent_t begin;
    cudaEvent_t end;
  };
  profiler::Mode mode = profiler::Mode::Off;
  std::vector<cudaEvent_t> pool;  // events reused across runs
  size_t pool_used = 0;
  std::vector<Pending> pending;
  std::map<std::string, profiler::OpTotals> flops_only;
  cudaEvent_t last = nullptr;  // launches mode: the previous event
  ~ProfilerState();
};

}  // namespace s3d

namespace s3d::profiler {

std::unique_ptr<ProfilerState> make_state();

// Both act on the current context's profiler.
void start(Mode mode);  // clears previous totals
Mode mode();

// Synchronises the current stream, stops, and returns totals by category (library mode:
// "gemm", "attention") or by op name (launches mode).
std::map<std::string, OpTotals> stop_and_collect();

// Library mode: wraps one library call. FLOPs are counted in every mode except Off.
class LibraryScope {
 public:
  LibraryScope(const char* category, double flops);
  ~LibraryScope();
  LibraryScope(const LibraryScope&) = delete;
  LibraryScope& operator=(const LibraryScope&) = delete;

 private:
  int slot_ = -1;
};

// Launches mode: called by after_launch and count_library_call.
void on_launch(const char* op);

}  // namespace s3d::profiler
