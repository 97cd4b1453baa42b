#include "core/cuda_graph.h"

#include <chrono>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d {

std::unique_ptr<CapturedGraph> CapturedGraph::capture(uint64_t pool,
                                                      const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CapturedGraph> g(new CapturedGraph());
  cudaStream_t stream = nullptr;
  S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cudaStream_t previous = current_stream();
  set_current_stream(stream);
  auto restore = [&] {
    set_current_stream(previous);
    cudaStreamDestroy(stream);
  };
  // Relaxed: a first-use cudaMalloc inside the pool stays legal while capturing.
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    restore();
    fail("CUDA graph capture could not begin: ", cudaGetErrorString(err));
  }
  try {
    UncountedLaunches uncounted;
    PoolScope scope(pool);
    fn();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    restore();
    throw;
  }
  err = cudaStreamEndCapture(stream, &g->graph_);
  restore();
  if (err != cudaSuccess || g->graph_ == nullptr) {
    cudaGetLastError();
    fail("CUDA graph capture failed: ", cudaGetErrorString(err),
         " (an operation in the captured forward is not capturable)");
  }
  err = cudaGraphInstantiate(&g->exec_, g->graph_, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA graph instantiation failed: ", cudaGetErrorString(err));
  }
  S3D_CUDA_CHECK(cudaGraphGetNodes(g->graph_, nullptr, &g->nodes_));
  g->capture_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CapturedGraph::launch() const {
  S3D_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream()));
  count_library_call("cuda_graph");
}

}  // namespace s3d
