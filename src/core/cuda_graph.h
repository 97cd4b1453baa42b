// One CUDA graph captured from the launches of a function (flag cuda_graphs):
// the function runs once under stream capture on a private stream (nothing executes), with a
// private allocator pool active so that every buffer the captured launches touch belongs to
// the caller's pool and keeps its address for every replay. The caller owns the pool and
// releases it after the graph and the tensors the function left alive.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace s3d {

class CapturedGraph {
 public:
  // Captures fn() (which launches on current_stream(), the capture stream meanwhile) with
  // `pool` active. Throws s3d::Error naming the failure; then nothing was captured.
  static std::unique_ptr<CapturedGraph> capture(uint64_t pool, const std::function<void()>& fn);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Replays the graph on the current stream; counted as one launch ("cuda_graph").
  void launch() const;
  size_t nodes() const { return nodes_; }
  double capture_seconds() const { return capture_seconds_; }

 private:
  CapturedGraph() = default;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  double capture_seconds_ = 0;
};

}  // namespace s3d
