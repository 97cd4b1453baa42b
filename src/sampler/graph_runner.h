// Per-request CUDA graphs (flag cuda_graphs; docs/CONTRACTS.md, "Per-request CUDA graphs"): per step kind, the first
// occurrence runs eagerly inside the kind's private allocator pool (it primes the library
// caches and workspaces); once every kind of the schedule has run once (so no later first
// run can grow a workspace a graph points to), the next occurrence is captured and every
// later one replays it, reading x, t and (with step_tables) the step's modulation from fixed
// buffers. Refusals are counted fallbacks and run eagerly.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/cuda_graph.h"
#include "sampler/step_forwards.h"

namespace s3d::sampler {

class GraphRunner {
 public:
  using Forwards = std::function<StepOut(const Tensor& x, const Tensor& t2, const Tensor& mod)>;

  // x_shape: the latent's; t_shape: the t row's; mod_shape: a step-table buffer's, or empty.
  GraphRunner(bool wanted, Device device, const StepPlan& plan, const Shape& x_shape,
              const Shape& t_shape, const Shape& mod_shape);
  // Releases the graphs, then their outputs, then their pools (call after the device is idle).
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  bool active() const { return active_; }
  // Step k's forwards: eager, captured now, or replayed. Capture statistics go to `out`.
  StepOut step(int k, const Tensor& x, const Tensor& t_row, const Tensor& mod,
               const Forwards& forwards, Output& out);

 private:
  struct KindGraph {
    uint64_t pool = 0;
    bool ran = false;
    std::unique_ptr<CapturedGraph> graph;
    StepOut out;  // the graph's outputs (its pool's blocks)
  };
  void refuse(const std::string& why);
  void capture(KindGraph& g, const Forwards& forwards, Output& out);

  bool active_;
  const StepPlan& plan_;
  std::map<int, KindGraph> kinds_;
  Tensor x_in_, t_in_, mod_in_;  // the graphs' fixed inputs
};

}  // namespace s3d::sampler
