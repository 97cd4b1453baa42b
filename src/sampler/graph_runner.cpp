#include "sampler/graph_runner.h"

#include "core/fallback.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/profiler.h"

namespace s3d::sampler {
namespace {

void copy_into(const Tensor& src, Tensor& dst) {
  S3D_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                 current_stream()));
  count_library_call("memcpy");
}

}  // namespace

GraphRunner::GraphRunner(bool wanted, Device device, const StepPlan& plan, const Shape& x_shape,
                         const Shape& t_shape, const Shape& mod_shape)
    : active_(wanted), plan_(plan) {
  if (active_ && device != Device::CUDA) refuse("the CPU backend has no CUDA graphs");
  if (active_ && profiler::mode() != profiler::Mode::Off)
    refuse("the profiler is on (its events cannot be read inside a graph)");
  if (active_ && !DeviceAllocator::current().caching())
    refuse("the caching allocator is off (SPARSE3D_NO_CACHING)");
  if (!active_) return;
  x_in_ = Tensor::empty(x_shape, DType::F32, device);
  t_in_ = Tensor::empty(t_shape, DType::F32, device);
  if (!mod_shape.empty()) mod_in_ = Tensor::empty(mod_shape, DType::BF16, device);
}

GraphRunner::~GraphRunner() {
  for (auto& [code, g] : kinds_) {
    g.graph.reset();
    g.out = StepOut{};
    DeviceAllocator::current().release_pool(g.pool);
  }
}

void GraphRunner::refuse(const std::string& why) {
  if (active_) record_fallback(sparse3d::Flag::cuda_graphs, why);
  active_ = false;
}

void GraphRunner::capture(KindGraph& g, const Forwards& forwards, Output& out) {
  try {
    g.graph = CapturedGraph::capture(g.pool, [&] { g.out = forwards(x_in_, t_in_, mod_in_); });
    out.graphs_captured++;
    out.graph_capture_seconds += g.graph->capture_seconds();
    out.graph_nodes += g.graph->nodes();
  } catch (const Error& e) {
    g.out = StepOut{};
    refuse(e.what());
  }
}

StepOut GraphRunner::step(int k, const Tensor& x, const Tensor& t_row, const Tensor& mod,
                          const Forwards& forwards, Output& out) {
  if (!active_) return forwards(x, t_row, mod);
  KindGraph& g = kinds_[plan_.kinds[static_cast<size_t>(k)].code()];
  if (g.pool == 0) g.pool = DeviceAllocator::current().create_pool();
  if (!g.graph && g.ran && k > plan_.all_kinds_ran) capture(g, forwards, out);
  if (active_ && g.graph) {
    copy_into(x, x_in_);
    copy_into(t_row, t_in_);
    if (mod.defined()) copy_into(mod, mod_in_);
    g.graph->launch();
    return g.out;
  }
  PoolScope scope(g.pool);
  StepOut so = forwards(x, t_row, mod);
  g.ran = true;
  return so;
}

}  // namespace s3d::sampler
