#include "core/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d::plan_search {
namespace {

// Per context: the report of what was searched.
struct State {
  std::mutex mu;
  std::vector<Row> rows;
};

State& state() { return current_context().state<State>(); }

// Destroys both events however the timing leaves (a failed launch throws).
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

}  // namespace

const char* kind_name(Kind k) { return k == Kind::Gemm ? "gemm" : "attention"; }

const char* source_name(Source s) { return s == Source::Searched ? "searched" : "cache"; }

double Row::gain() const {
  return choice.default_ms > 0 && choice.best_ms > 0 ? choice.default_ms / choice.best_ms : 1.0;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  S3D_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

std::optional<double> time_per_call(const std::function<bool()>& launch, cudaStream_t stream) {
  for (int i = 0; i < kWarmupCalls; ++i)
    if (!launch()) return std::nullopt;
  Events ev;
  S3D_CUDA_CHECK(cudaEventCreate(&ev.start));
  S3D_CUDA_CHECK(cudaEventCreate(&ev.stop));
  S3D_CUDA_CHECK(cudaEventRecord(ev.start, stream));
  for (int i = 0; i < kTimedCalls; ++i)
    if (!launch()) {
      // Drain what was queued, so the next candidate's timing starts clean.
      S3D_CUDA_CHECK(cudaStreamSynchronize(stream));
      return std::nullopt;
    }
  S3D_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
  S3D_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float ms = 0;
  S3D_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return static_cast<double>(ms) / kTimedCalls;
}

int choose(const std::vector<double>& ms, int default_index) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(ms.size()); ++i)
    if (ms[i] >= 0 && (best < 0 || ms[i] < ms[best])) best = i;
  if (best < 0) return -1;
  const bool has_default = default_index >= 0 && default_index < static_cast<int>(ms.size()) &&
                           ms[default_index] >= 0;
  if (has_default && ms[best] >= ms[default_index] * (1.0 - kMinGain)) return default_index;
  return best;
}

void record(const Row& row) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (Row& r : s.rows)
    if (r.kind == row.kind && r.shape == row.shape) {
      r = row;
      return;
    }
  s.rows.push_back(row);
}

std::vector<Row> report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.rows;
}

void reset_report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rows.clear();
}

std::string format_report(const std::vector<Row>& rows) {
  if (rows.empty()) return "";
  size_t width = 5;  // "shape"
  for (const Row& r : rows) width = std::max(width, r.shape.size());
  std::vector<char> buf(width + 128);  // the fixed columns take < 100
  char* line = buf.data();
  std::snprintf(line, buf.size(), "%-9s  %-*s  %10s  %10s  %10s  %6s  %5s  %s\n", "kind",
                static_cast<int>(width), "shape", "candidates", "default ms", "best ms", "gain",
                "index", "source");
  std::string out = line;
  for (const Row& r : rows) {
    const std::string cand =
        r.choice.timed == r.choice.candidates || r.source == Source::Cache
            ? cat(r.choice.candidates)
            : cat(r.choice.timed, "/", r.choice.candidates);
    std::snprintf(line, buf.size(), "%-9s  %-*s  %10s  %10.4f  %10.4f  %5.2fx  %5d  %s\n",
                  kind_name(r.kind), static_cast<int>(width), r.shape.c_str(), cand.c_str(),
                  r.choice.default_ms, r.choice.best_ms, r.gain(), r.choice.index,
                  source_name(r.source));
    out += line;
  }
  return out;
}

}  // namespace s3d::plan_search
