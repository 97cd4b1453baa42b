// Scaled dot-product attention over ragged batches: cuDNN SDPA through cudnn-frontend on the
// GPU, a plain fp32 loop on the CPU. Queries of sequence i attend to keys and values of
// sequence i only. Q, K and V are strided row views (e.g. straight into a packed
// [T, 3, H, D] QKV buffer), so no split or copy is needed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/plan_search.h"
#include "core/tensor.h"

namespace s3d::attention {

// B ragged sequences, described once per request: lengths on the host, prefix sums on the
// backend's device. Nothing in a forward pass reads it back to the host.
struct SeqLayout {
  std::vector<int32_t> lengths;  // host, [B]
  std::vector<int64_t> offsets;  // host, [B + 1]
  int32_t max_len = 0;
  Tensor cu_seqlens;             // i32 [B + 1] on `device`
  Tensor seq_lens;               // i32 [B] on `device`
  Device device = Device::CPU;
  // Ragged offsets in elements (cu_seqlens * token stride) for the cuDNN graph, built on the
  // device on first use per stride and kept for the rest of the request.
  mutable std::map<int64_t, Tensor> ragged_offsets;

  int batch() const { return static_cast<int>(lengths.size()); }
  int64_t total() const { return offsets.empty() ? 0 : offsets.back(); }
};

// Throws if there is no sequence, any length is negative or the total overflows int32.
SeqLayout make_seq_layout(const std::vector<int32_t>& lengths, Device device);

// out[t, h*D + d] = sum_s softmax_s(scale * q[t, h, :] . k[s, h, :]) v[s, h, d] for s in the
// sequence of t. q: rows = q_layout.total(), cols = H*D; k, v: rows = kv_layout.total();
// all bf16 (fp32 softmax and accumulation); out: bf16 [q_layout.total(), H*D]. A sequence
// with no keys is an error. On the GPU an empty query sequence is rejected too, head_dim and
// the row strides must be multiples of 8 and the rows 16-byte aligned (cuDNN's requirements).
// Which cuDNN SDPA implementation a graph is built with: unified then composite (auto: the
// frontend's own order, but a unified graph that passes the support check yet fails to build
// still falls back), or one of them alone. The op table resolves it once per request (src/ops,
// row `attention`).
enum class Implementation : uint8_t { Auto, Unified, Composite };
const char* implementation_name(Implementation i);  // "auto" | "unified" | "composite"

// How one call runs on the GPU (no effect on the CPU): the implementation, and whether the
// graph's execution plan is searched (candidate tuned_attention of the `attention` row).
struct Config {
  Implementation implementation = Implementation::Auto;
  plan_search::Search search;
};

void sdpa_varlen(const RowView& q, const SeqLayout& q_layout, const RowView& k,
                 const RowView& v, const SeqLayout& kv_layout, int heads, int head_dim,
                 float scale, Tensor& out, const Config& config = {});

// Frees the cuDNN handles, cached graphs and workspaces (the next call rebuilds them): for a
// clean shutdown, e.g. before compute-sanitizer's leak check or to hand memory back.
void release_resources();
// Returns the current context's cuDNN workspaces to its allocator and keeps the handles and
// graphs (the next run takes one again). Never while a CUDA graph that captured them may
// replay. Bytes returned.
size_t release_workspaces();

// "9.19.0", or "none" without a GPU.
std::string cudnn_version();

// How many cuDNN SDPA graphs this process has built. Graphs are cached per (batch, bucketed
// max lengths, heads, head_dim, strides, scale), so this stays flat across requests whose token
// counts fall in the same power-of-two buckets; tests and `bench` check it.
int64_t sdpa_graphs_built();

}  // namespace s3d::attention
