// Internal: the narrow door into the GPU side of attention. attention_cudnn.cpp is the only
// file that compiles the cudnn-frontend headers (a minute each time); everyone else talks to
// it through these plain structs. ragged.cu holds the one small kernel the graph needs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/plan_search.h"

namespace s3d::attention::detail {

// Everything a graph depends on; equal shapes reuse one built graph.
struct SdpaShape {
  int batch = 0;
  int heads = 0;
  int head_dim = 0;
  int64_t s_q_bucket = 0;   // >= every query length, a power of two (attention.cpp)
  int64_t s_kv_bucket = 0;  // >= every key length, a power of two
  int64_t q_stride = 0;     // elements between consecutive tokens of Q, K, V
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  float scale = 0.0f;
  int implementation = 0;   // attention::Implementation: auto, unified, composite
};

// Device pointers for one call. q/k/v/o point at the first element of token 0 (head 0);
// ragged_* hold batch + 1 int32 element offsets (cu_seqlens * token stride).
struct SdpaPointers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  const int32_t* seq_len_q = nullptr;
  const int32_t* seq_len_kv = nullptr;
  const int32_t* ragged_q = nullptr;
  const int32_t* ragged_k = nullptr;
  const int32_t* ragged_v = nullptr;
  const int32_t* ragged_o = nullptr;
};

// Runs (building and caching the graph on first use) on `stream`; throws s3d::Error.
// `search`: the plan search (tuned_attention) and its store.
void cudnn_sdpa_forward(const SdpaShape& shape, const SdpaPointers& ptrs, cudaStream_t stream,
                        const plan_search::Search& search);
int64_t cudnn_sdpa_graphs_built();
// Destroys the handles and cached graphs and returns the workspaces.
void release_cudnn_sdpa();
// Returns the workspaces and keeps the handles and graphs; the next run takes one again.
size_t release_cudnn_sdpa_workspaces();
// One line per cached graph: its shape, the implementation cuDNN chose and its workspace.
std::string cudnn_sdpa_cache_summary();
// cudnnGetVersion(), e.g. 91900.
size_t cudnn_backend_version();

// out[i] = cu_seqlens[i] * stride for i in [0, n), int32, on `stream` (ragged.cu).
void launch_ragged_offsets(const int32_t* cu_seqlens, int n, int32_t stride, int32_t* out,
                           cudaStream_t stream);

}  // namespace s3d::attention::detail
