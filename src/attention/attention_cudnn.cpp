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
//
// With tuned_attention (core/plan_search.h) a graph first seen asks cuDNN for every
// execution plan its heuristics (modes A, then FALLBACK) offer, builds each (at most
// kMaxCandidates distinct engine configs), times each on the call's own operands and
// executes the fastest by its index from then on (or restores the index a store kept). The
// tuned and the default graph are different keys, so both paths coexist in one process.
#include <cudnn.h>
// The frontend's headers define a helper they never call; keep our -Wall -Wextra build quiet.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/cudnn_sdpa.h"
#include "core/allocator.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fallback.h"
#include "core/fault.h"
#include "core/first_use.h"
#include "core/plan_search.h"

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
  bool tuned = false;   // the searched plan (tuned_attention) rather than the heuristic's first
  auto tie() const {
    return std::tie(device, s.batch, s.heads, s.head_dim, s.s_q_bucket, s.s_kv_bucket, s.q_stride,
                    s.k_stride, s.v_stride, scale_bits, s.implementation, tuned);
  }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  const char* implementation = "";
  int64_t plan_index = -1;  // tuned: the execution plan run; -1: the frontend's candidate
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

// The SDPA graph of `s`, validated and lowered to an operation graph (no plans yet).
std::shared_ptr<fe::graph::Graph> operation_graph(const SdpaShape& s, cudnnHandle_t handle,
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
  return g;
}

CachedGraph build_graph(const SdpaShape& s, cudnnHandle_t handle,
                        fe::AttentionImplementation_t impl) {
  std::shared_ptr<fe::graph::Graph> g = operation_graph(s, handle, impl);
  check_fe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check_fe(g->check_support(), "check_support");
  check_fe(g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
  CachedGraph c;
  check_fe(g->get_workspace_size(c.workspace_bytes), "get_workspace_size");
  c.graph = std::move(g);
  return c;
}

// The graph's implementation (SdpaShape::implementation, resolved by the op table).
const char* requested_implementation(const SdpaShape& s) {
  return implementation_name(static_cast<Implementation>(s.implementation));
}

struct Attempt {
  fe::AttentionImplementation_t impl;
  const char* name;
};

// The implementations to try, in order, for the shape's implementation.
std::vector<Attempt> implementation_attempts(const SdpaShape& s) {
  const std::string want = requested_implementation(s);
  if (want == "auto")
    return {{fe::AttentionImplementation_t::UNIFIED, "unified"},
            {fe::AttentionImplementation_t::COMPOSITE, "composite"}};
  if (want == "unified") return {{fe::AttentionImplementation_t::UNIFIED, "unified"}};
  return {{fe::AttentionImplementation_t::COMPOSITE, "composite"}};
}

CachedGraph build_cached(const SdpaShape& s, cudnnHandle_t handle) {
  S3D_CHECK(!fault::hit(fault::Point::PlanBuild), "cuDNN SDPA graph build failed for ",
            describe(s), " (injected fault)");
  const std::vector<Attempt> attempts = implementation_attempts(s);
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

// After a plan search the workspace holds the largest candidate's need, which may be far
// more than any kept graph's (a split-KV engine at 30,000 tokens, say): held for the life of
// the engine, it would count against every later request's memory. Shrink it to what the
// kept graphs and `keep` need. Only outside a capture (searches never run inside one), so no
// captured graph holds the old pointer.
void shrink_workspace(DeviceState& st, int64_t keep) {
  int64_t need = keep;
  for (const auto& [key, g] : st.graphs) need = std::max(need, g.workspace_bytes);
  const size_t capacity = static_cast<size_t>(need < 256 ? 256 : need);
  if (st.workspace == nullptr || st.workspace_capacity <= capacity) return;
  st.allocator->release(st.workspace, st.workspace_capacity);
  st.workspace = nullptr;
  st.workspace_capacity = 0;
  ensure_workspace(st, need);
}

// The shape as the qualification cache keys it: the graph's key without the device ordinal
// (the fingerprint names the GPU), plus the implementations the shape allows.
std::string shape_text(const SdpaShape& s, uint32_t scale_bits) {
  char bits[16];
  std::snprintf(bits, sizeof bits, "%08x", scale_bits);
  return cat("B=", s.batch, " H=", s.heads, " D=", s.head_dim, " Sq<=", s.s_q_bucket, " Skv<=",
             s.s_kv_bucket, " strides ", s.q_stride, "/", s.k_stride, "/", s.v_stride,
             " scale 0x", bits, " impl ", requested_implementation(s));
}

// A graph of `s` with the plans of heuristic modes A and FALLBACK listed (none built yet):
// the list a choice's index points into, deterministic for a fixed library, GPU and shape.
std::shared_ptr<fe::graph::Graph> listed_graph(const SdpaShape& s, cudnnHandle_t handle,
                                               const Attempt& a) {
  std::shared_ptr<fe::graph::Graph> g = operation_graph(s, handle, a.impl);
  check_fe(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
           "create_execution_plans");
  check_fe(g->check_support(), "check_support");
  return g;
}

// The stored choice of `shape` rebuilt: only its plan, from its implementation's list.
// nullopt when there is none or it no longer holds (refused and counted: the caller searches).
std::optional<CachedGraph> restore_tuned(const SdpaShape& s, const std::string& shape,
                                         DeviceState& st, plan_search::Store& store,
                                         const std::vector<Attempt>& attempts) {
  using plan_search::Kind;
  const std::optional<plan_search::Choice> c = store.find_plan(Kind::Attention, shape);
  if (!c) return std::nullopt;
  std::string why = cat("the stored implementation '", c->variant, "' is not allowed now");
  for (const Attempt& a : attempts) {
    if (c->variant != a.name) continue;
    try {
      std::shared_ptr<fe::graph::Graph> g = listed_graph(s, st.handle, a);
      const int64_t count =
          std::min<int64_t>(g->get_execution_plan_count(), plan_search::kMaxCandidates);
      // A list of another length means the index no longer names the same plan.
      if (count != c->candidates || c->index >= count) {
        why = cat("the stored choice is plan ", c->index, " of ", c->candidates,
                  " but cuDNN now offers ", count);
        break;
      }
      check_fe(g->build_plan_at_index(c->index), "build_plan_at_index");
      CachedGraph cg;
      check_fe(g->get_workspace_size_plan_at_index(c->index, cg.workspace_bytes),
               "get_workspace_size_plan_at_index");
      cg.graph = std::move(g);
      cg.implementation = a.name;
      cg.plan_index = c->index;
      plan_search::record({Kind::Attention, shape, *c, plan_search::Source::Cache});
      return cg;
    } catch (const BuildFailure& e) {
      why = cat("the stored plan ", c->index, " does not build (", e.message, ")");
    } catch (const std::exception& e) {
      why = cat("the stored plan ", c->index, " does not build (", e.what(), ")");
    }
    break;
  }
  store.refuse_plan(Kind::Attention, shape, why + ": searching again");
  return std::nullopt;
}

// One implementation's plans built and timed on `pack`; the fastest (or the default within
// plan_search::kMinGain) with its Choice. nullopt, with the reason added to `errors`, when
// none builds or runs.
std::optional<std::pair<CachedGraph, plan_search::Choice>> search_implementation(
    const SdpaShape& s, const Attempt& a, DeviceState& st,
    std::unordered_map<int64_t, void*>& pack, cudaStream_t stream, std::string& errors) {
  std::shared_ptr<fe::graph::Graph> g;
  std::vector<int64_t> built;  // indices of the plans that built, list order
  int64_t count = 0;
  try {
    g = listed_graph(s, st.handle, a);
    count = std::min<int64_t>(g->get_execution_plan_count(), plan_search::kMaxCandidates);
    std::set<std::string> seen;  // both modes may list one engine config: time it once
    for (int64_t i = 0; i < count; ++i) {
      std::string name;
      if (g->get_plan_name_at_index(i, name).is_good() && !seen.insert(name).second) continue;
      if (g->build_plan_at_index(i).is_good()) built.push_back(i);
    }
  } catch (const BuildFailure& e) {
    errors += cat(" [", a.name, "] ", e.message);
    return std::nullopt;
  } catch (const std::exception& e) {  // the frontend can throw from sdpa() itself
    errors += cat(" [", a.name, "] ", e.what());
    return std::nullopt;
  }
  if (built.empty()) {
    errors += cat(" [", a.name, "] none of ", count, " plans built");
    return std::nullopt;
  }
  int64_t max_workspace = 0;
  for (int64_t i : built) {
    int64_t w = 0;
    check_fe(g->get_workspace_size_plan_at_index(i, w), "get_workspace_size_plan_at_index");
    max_workspace = std::max(max_workspace, w);
  }
  ensure_workspace(st, max_workspace);
  check_cudnn(cudnnSetStream(st.handle, stream), "cudnnSetStream", describe(s));
  std::vector<double> ms(static_cast<size_t>(count), -1.0);
  for (int64_t i : built) {
    std::optional<double> t = plan_search::time_per_call(
        [&] { return g->execute_plan_at_index(st.handle, pack, st.workspace, i).is_good(); },
        stream);
    if (t) ms[static_cast<size_t>(i)] = *t;
  }
  // The default graph runs the first plan that builds, in the heuristic's order.
  const int first = static_cast<int>(built.front());
  const int best = plan_search::choose(ms, first);
  if (best < 0) {
    errors += cat(" [", a.name, "] none of ", built.size(), " built plans ran");
    return std::nullopt;
  }
  plan_search::Choice c;
  c.index = best;
  c.candidates = static_cast<int>(count);
  c.timed = static_cast<int>(std::count_if(ms.begin(), ms.end(), [](double v) { return v >= 0; }));
  c.variant = a.name;
  c.best_ms = ms[static_cast<size_t>(best)];
  c.default_ms = ms[static_cast<size_t>(first)] >= 0 ? ms[static_cast<size_t>(first)] : c.best_ms;
  CachedGraph cg;
  check_fe(g->get_workspace_size_plan_at_index(best, cg.workspace_bytes),
           "get_workspace_size_plan_at_index");
  cg.graph = std::move(g);
  cg.implementation = a.name;
  cg.plan_index = best;
  return std::make_pair(std::move(cg), c);
}

// The tuned graph of `key`: the stored choice when `store` holds one that still builds, else
// (outside a capture) every plan built and timed on the call's operands `pack`. Nothing (a
// capture, no stored choice): the caller runs the default graph and counts the fallback.
std::optional<CachedGraph> build_tuned(const GraphKey& key, DeviceState& st,
                                       std::unordered_map<int64_t, void*>& pack,
                                       cudaStream_t stream, plan_search::Store* store) {
  using plan_search::Kind;
  const SdpaShape& s = key.s;
  S3D_CHECK(!fault::hit(fault::Point::PlanBuild), "cuDNN SDPA graph build failed for ",
            describe(s), " (injected fault)");
  const std::string shape = shape_text(s, key.scale_bits);
  const std::vector<Attempt> attempts = implementation_attempts(s);
  if (store != nullptr)
    if (std::optional<CachedGraph> restored = restore_tuned(s, shape, st, *store, attempts))
      return restored;
  if (plan_search::capturing(stream)) return std::nullopt;
  std::string errors;
  for (const Attempt& a : attempts) {
    auto found = search_implementation(s, a, st, pack, stream, errors);
    if (!found) continue;
    auto& [cg, c] = *found;
    shrink_workspace(st, cg.workspace_bytes);
    if (store != nullptr) store->store_plan(Kind::Attention, shape, c);
    plan_search::record({Kind::Attention, shape, c, plan_search::Source::Searched});
    return std::move(cg);
  }
  fail("cuDNN SDPA plan search found no plan that builds and runs for ", describe(s), " (cuDNN ",
       cudnnGetVersion(), ", frontend ", CUDNN_FRONTEND_VERSION, "):", errors);
}

}  // namespace

void cudnn_sdpa_forward(const SdpaShape& shape, const SdpaPointers& p, cudaStream_t stream,
                        const plan_search::Search& search) {
  int device = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&device));
  DeviceState& st = device_state(device);
  GraphKey key{device, shape, 0, search.on};
  std::memcpy(&key.scale_bits, &shape.scale, sizeof key.scale_bits);
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
  auto it = st.graphs.find(key);
  if (it == st.graphs.end() && key.tuned) {
    std::optional<CachedGraph> tuned;
    {
      FirstUseTimer timer("attention_plan_search");
      tuned = build_tuned(key, st, pack, stream, search.store);
    }
    if (tuned) {
      it = st.graphs.emplace(key, std::move(*tuned)).first;
      ++current_context().state<ContextStates>().graphs_built;
    } else {
      // The engine runs each step kind once eagerly before capturing it, so a graph first
      // seen inside a capture is unexpected; it is counted, never timed there.
      record_fallback(sparse3d::Flag::tuned_attention,
                      "an attention shape was first seen during CUDA graph capture, where plans "
                      "cannot be timed; ran cuDNN's default plan");
      key.tuned = false;
      it = st.graphs.find(key);
    }
  }
  if (it == st.graphs.end()) {
    FirstUseTimer timer("attention_graph");
    it = st.graphs.emplace(key, build_cached(shape, st.handle)).first;
    ++current_context().state<ContextStates>().graphs_built;
  }
  const CachedGraph& c = it->second;
  ensure_workspace(st, c.workspace_bytes);

  check_cudnn(cudnnSetStream(st.handle, stream), "cudnnSetStream", describe(shape));
  fe::error_t status =
      c.plan_index >= 0 ? c.graph->execute_plan_at_index(st.handle, pack, st.workspace, c.plan_index)
                        : c.graph->execute(st.handle, pack, st.workspace);
  if (status.is_bad())
    fail("cuDNN SDPA execute failed for ", describe(shape), " (", c.implementation,
         " implementation): ", status.get_message());
  count_library_call("sdpa");
}

int64_t cudnn_sdpa_graphs_built() { return current_context().state<ContextStates>().graphs_built; }

void release_cudnn_sdpa() { release_states(all_states()); }

size_t release_cudnn_sdpa_workspaces() {
  size_t released = 0;
  for (auto& [device, st] : all_states()) {
    if (st.workspace == nullptr) continue;
    st.allocator->release(st.workspace, st.workspace_capacity);
    released += st.workspace_capacity;
    st.workspace = nullptr;
    st.workspace_capacity = 0;
  }
  return released;
}

std::string cudnn_sdpa_cache_summary() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  std::string out;
  for (const auto& [key, c] : device_state(device).graphs)
    out += cat(describe(key.s), ": ", c.implementation,
               key.tuned ? cat(", searched plan ", c.plan_index) : std::string(), ", workspace ",
               c.workspace_bytes, " bytes\n");
  return out;
}

size_t cudnn_backend_version() { return cudnnGetVersion(); }

}  // namespace s3d::attention::detail
