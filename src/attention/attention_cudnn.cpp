// cuDNN SDPA through cudnn-frontend: the only translation unit that includes cudnn_frontend.h.
//
// The graph (one per SdpaShape, built once, cached for the life of the process):
//   bf16 Q, K, V, O; fp32 intermediate and compute; inference (no softmax stats);
//   Q/K/V dims [B, H, S_bucket, D], strides {S_bucket * token_stride, D, token_stride, 1}:
//   strided views straight into the caller's buffers (e.g. a packed [T, 3, H, D] QKV), head h
//   of token s of sequence b at ragged_offset[b] + s * token_stride + h * D. The batch stride is
//   unused: every tensor is ragged (int32 element offsets = cu_seqlens * token_stride).
//   O is ragged too, dense [T, H, D] (token stride H * D).
//   A padding mask with seq_len_q / seq_len_kv [B, 1, 1, 1] int32 limits each sequence to its
//   true length, so one graph serves every length up to its bucket.
//
// Ragged bounds: the frontend headers (graph_properties.h, SDPA_attributes::max_total_seq_len_*)
// say the backend sees ragged extents only as (B, H, S_max, D) plus the offsets; the packed
// total is never lowered. So, formally, the last sequence may be addressed up to S_bucket rows
// past its start. With the padding mask, rows at or past seq_len must not contribute; the GPU
// test checks this with a NaN-poisoned guard region after the last row of Q, K, V and O.
#include <cudnn.h>
// The frontend's headers define a helper they never call; keep our -Wall -Wextra build quiet.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "attention/cudnn_sdpa.h"
#include "core/allocator.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fault.h"

namespace fe = cudnn_frontend;

namespace s3d::attention::detail {
namespace {

enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kSeqLenQ,
  kSeqLenKV,
  kRaggedQ,
  kRaggedK,
  kRaggedV,
  kRaggedO
};

struct GraphKey {
  int device;
  SdpaShape s;
  uint32_t scale_bits;  // compared bitwise: a graph bakes its scale in
  auto tie() const {
    return std::tie(device, s.batch, s.heads, s.head_dim, s.s_q_bucket, s.s_kv_bucket, s.q_stride,
                    s.k_stride, s.v_stride, scale_bits);
  }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  const char* implementation = "";
};

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::shared_ptr<DeviceAllocator> allocator;  // the workspace's (its context's)
  size_t workspace_capacity = 0;
  std::map<GraphKey, CachedGraph> graphs;
};

std::string describe(const SdpaShape& s) {
  return cat("B=", s.batch, " H=", s.heads, " D=", s.head_dim, " S_q bucket ", s.s_q_bucket,
             " S_kv bucket ", s.s_kv_bucket, " token strides q ", s.q_stride, " k ", s.k_stride,
             " v ", s.v_stride, " scale ", s.scale);
}

// Thrown inside the build to carry the failing stage out of the frontend's error_t.
struct BuildFailure {
  std::string message;
};

void check_fe(fe::error_t status, const char* stage) {
  if (status.is_bad()) throw BuildFailure{cat(stage, ": ", status.get_message())};
}

void check_cudnn(cudnnStatus_t status, const char* call, const std::string& context) {
  if (status != CUDNN_STATUS_SUCCESS)
    fail("cuDNN ", call, " failed: ", cudnnGetErrorString(status), " (", context, ")");
}

void release_states(std::map<int, DeviceState>& states) {
  for (auto& [device, st] : states) {
    st.graphs.clear();
    if (st.workspace) st.allocator->release(st.workspace, st.workspace_capacity);
    if (st.handle) cudnnDestroy(st.handle);
  }
  states.clear();
}

// Handles, graphs and workspaces per device, owned by the current context (core/context.h):
// they live until release_cudnn_sdpa() or the context's end.
struct ContextStates {
  std::map<int, DeviceState> by_device;
  int64_t graphs_built = 0;
  ~ContextStates() { release_states(by_device); }
};

std::map<int, DeviceState>& all_states() { return current_context().state<ContextStates>().by_device; }

DeviceState& device_state(int device) {
  DeviceState& st = all_states()[device];
  if (st.handle == nullptr)
    check_cudnn(cudnnCreate(&st.handle), "cudnnCreate", cat("device ", device));
  return st;
}

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name,
                                                           int64_t uid, int64_t n) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

CachedGraph build_graph(const SdpaShape& s, cudnnHandle_t handle,
                        fe::AttentionImplementation_t impl) {
  const int64_t B = s.batch, H = s.heads, D = s.head_dim, Sq = s.s_q_bucket, Skv = s.s_kv_bucket;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);

  auto ragged_q = index_tensor(*g, "ragged_q", kRaggedQ, B + 1);
  auto ragged_k = index_tensor(*g, "ragged_k", kRaggedK, B + 1);
  auto ragged_v = index_tensor(*g, "ragged_v", kRaggedV, B + 1);
  auto ragged_o = index_tensor(*g, "ragged_o", kRaggedO, B + 1);
  auto seq_q = index_tensor(*g, "seq_len_q", kSeqLenQ, B);
  auto seq_kv = index_tensor(*g, "seq_len_kv", kSeqLenKV, B);

  auto strided = [&](const char* name, int64_t uid, int64_t S, int64_t stride,
                     std::shared_ptr<fe::graph::Tensor_attributes> ragged) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({B, H, S, D})
                         .set_stride({S * stride, D, stride, 1})
                         .set_ragged_offset(ragged));
  };
  auto Q = strided("Q", kQ, Sq, s.q_stride, ragged_q);
  auto K = strided("K", kK, Skv, s.k_stride, ragged_k);
  auto V = strided("V", kV, Skv, s.v_stride, ragged_v);

  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_varlen")
                     .set_generate_stats(false)
                     .set_attn_scale(s.scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_q)
                     .set_seq_len_kv(seq_kv)
                     .set_implementation(impl);
  auto outputs = g->sdpa(Q, K, V, options);
  outputs[0]
      ->set_output(true)
      .set_uid(kO)
      .set_dim({B, H, Sq, D})
      .set_stride({Sq * H * D, D, H * D, 1})
      .set_ragged_offset(ragged_o);

  check_fe(g->validate(), "validate");
  check_fe(g->build_operation_graph(handle), "build_operation_graph");
  check_fe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check_fe(g->check_support(), "check_support");
  check_fe(g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
  CachedGraph c;
  check_fe(g->get_workspace_size(c.workspace_bytes), "get_workspace_size");
  c.graph = std::move(g);
  return c;
}

// SPARSE3D_SDPA_IMPLEMENTATION = auto (default) | unified | composite. Auto tries unified, then
// composite: the frontend's own AUTO order, but we learn which one built, and a unified graph
// that passes the support check yet fails to build still falls back.
const char* requested_implementation() {
  const char* env = std::getenv("SPARSE3D_SDPA_IMPLEMENTATION");
  if (env == nullptr || std::strcmp(env, "auto") == 0) return "auto";
  if (std::strcmp(env, "unified") == 0) return "unified";
  if (std::strcmp(env, "composite") == 0) return "composite";
  fail("SPARSE3D_SDPA_IMPLEMENTATION is '", env, "'; expected auto, unified or composite");
}

CachedGraph build_cached(const SdpaShape& s, cudnnHandle_t handle) {
  const std::string want = requested_implementation();
  S3D_CHECK(!fault::hit(fault::Point::PlanBuild), "cuDNN SDPA graph build failed for ",
            describe(s), " (injected fault)");
  struct Attempt {
    fe::AttentionImplementation_t impl;
    const char* name;
  };
  std::vector<Attempt> attempts;
  if (want == "auto") {
    attempts = {{fe::AttentionImplementation_t::UNIFIED, "unified"},
                {fe::AttentionImplementation_t::COMPOSITE, "composite"}};
  } else if (want == "unified") {
    attempts = {{fe::AttentionImplementation_t::UNIFIED, "unified"}};
  } else {
    attempts = {{fe::AttentionImplementation_t::COMPOSITE, "composite"}};
  }
  std::string errors;
  for (const Attempt& a : attempts) {
    try {
      CachedGraph c = build_graph(s, handle, a.impl);
      c.implementation = a.name;
      return c;
    } catch (const BuildFailure& e) {
      errors += cat(" [", a.name, "] ", e.message);
    } catch (const std::exception& e) {  // the frontend can throw from sdpa() itself
      errors += cat(" [", a.name, "] ", e.what());
    }
  }
  fail("cuDNN SDPA graph build failed for ", describe(s), " (cuDNN ", cudnnGetVersion(),
       ", frontend ", CUDNN_FRONTEND_VERSION, "):", errors);
}

void ensure_workspace(DeviceState& st, int64_t bytes) {
  const size_t need = static_cast<size_t>(bytes > 0 ? bytes : 0);
  if (st.workspace != nullptr && need <= st.workspace_capacity) return;
  // Released to the caching allocator: work already queued on the stream finishes first.
  // Forgotten before the new request, so that a failed allocation leaves no stale pointer.
  if (st.workspace != nullptr) st.allocator->release(st.workspace, st.workspace_capacity);
  st.workspace = nullptr;
  st.workspace_capacity = 0;
  st.allocator = current_context().allocator_handle();
  const size_t capacity = need < 256 ? 256 : need;
  st.workspace = st.allocator->allocate(capacity);
  st.workspace_capacity = capacity;
}

}  // namespace

void cudnn_sdpa_forward(const SdpaShape& shape, const SdpaPointers& p, cudaStream_t stream) {
  int device = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&device));
  DeviceState& st = device_state(device);
  GraphKey key{device, shape, 0};
  std::memcpy(&key.scale_bits, &shape.scale, sizeof key.scale_bits);
  auto it = st.graphs.find(key);
  if (it == st.graphs.end()) {
    it = st.graphs.emplace(key, build_cached(shape, st.handle)).first;
    ++current_context().state<ContextStates>().graphs_built;
  }
  const CachedGraph& c = it->second;
  ensure_workspace(st, c.workspace_bytes);

  check_cudnn(cudnnSetStream(st.handle, stream), "cudnnSetStream", describe(shape));
  // The frontend's variant pack is non-const; cuDNN only reads the inputs.
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(p.q)},
      {kK, const_cast<void*>(p.k)},
      {kV, const_cast<void*>(p.v)},
      {kO, p.o},
      {kSeqLenQ, const_cast<int32_t*>(p.seq_len_q)},
      {kSeqLenKV, const_cast<int32_t*>(p.seq_len_kv)},
      {kRaggedQ, const_cast<int32_t*>(p.ragged_q)},
      {kRaggedK, const_cast<int32_t*>(p.ragged_k)},
      {kRaggedV, const_cast<int32_t*>(p.ragged_v)},
      {kRaggedO, const_cast<int32_t*>(p.ragged_o)},
  };
  fe::error_t status = c.graph->execute(st.handle, pack, st.workspace);
  if (status.is_bad())
    fail("cuDNN SDPA execute failed for ", describe(shape), " (", c.implementation,
         " implementation): ", status.get_message());
  count_library_call("sdpa");
}

int64_t cudnn_sdpa_graphs_built() { return current_context().state<ContextStates>().graphs_built; }

void release_cudnn_sdpa() { release_states(all_states()); }

std::string cudnn_sdpa_cache_summary() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  std::string out;
  for (const auto& [key, c] : device_state(device).graphs)
    out +=
        cat(describe(key.s), ": ", c.implementation, ", workspace ", c.workspace_bytes, " bytes\n");
  return out;
}

size_t cudnn_backend_version() { return cudnnGetVersion(); }

}  // namespace s3d::attention::detail
