// cuBLASLt for gemm::linear. Row-major y[M,N] = x[M,K] W[N,K]^T is computed as the
// column-major product y^T[N,M] = op(A) B with A = W seen column-major as [K,N] (op = T) and
// B = x seen column-major as [K,M] (op = N); the bias (length N = rows of y^T) is then the
// per-row bias of cuBLASLt's epilogue, added in fp32 before the single rounding at the store.
//
// Descriptors, layouts and the heuristic's algorithm are made once per key (shape, dtype,
// epilogue, pointer alignment) and kept for the life of the process; a call then only sets
// the bias pointer and launches, with no host synchronisation.
//
// With tuned_gemm (core/plan_search.h) a key first seen asks the heuristic for up to
// kMaxCandidates algorithms, times each on the call's own operands and keeps the fastest
// (or restores the index a store kept for this shape). The tuned and the default plan are
// different keys, so both paths coexist in one process.
#include "gemm/linear_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fallback.h"
#include "core/fault.h"
#include "core/first_use.h"
#include "core/plan_search.h"
#include "gemm/linear.h"

namespace s3d::gemm {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

void check_lt(cublasStatus_t status, const char* call, const std::string& context) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt ", call, " failed with ", cublasLtGetStatusName(status), " (",
         cublasLtGetStatusString(status), ") for ", context);
}

// The largest power of two (up to cuBLASLt's default requirement of 256) dividing the address.
// Algorithms are chosen for the alignment actually seen, so row views at odd offsets still run.
uint32_t alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  DType dtype;
  Epilogue epilogue;
  uint32_t align_x, align_w, align_y;
  bool tuned = false;  // the searched algorithm (tuned_gemm) rather than the heuristic's first
  auto tie() const {
    return std::tie(device, m, n, k, dtype, epilogue, align_x, align_w, align_y, tuned);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::shared_ptr<DeviceAllocator> allocator;  // the workspace's (its context's)
  std::map<PlanKey, Plan> plans;
};

void release_states(std::map<int, DeviceState>& states);

// Handles, plans and workspaces per device, owned by the current context (core/context.h):
// they live until release_cublaslt() or the context's end.
struct ContextStates {
  std::map<int, DeviceState> by_device;
  ~ContextStates() { release_states(by_device); }
};

std::map<int, DeviceState>& all_states() { return current_context().state<ContextStates>().by_device; }

DeviceState& device_state(int device) {
  DeviceState& s = all_states()[device];
  // Each piece on its own, so that a failed allocation leaves no half-made state behind.
  if (s.handle == nullptr)
    check_lt(cublasLtCreate(&s.handle), "cublasLtCreate", cat("device ", device));
  if (s.workspace == nullptr) {
    s.allocator = current_context().allocator_handle();
    s.workspace = s.allocator->allocate(kWorkspaceBytes);
  }
  return s;
}

void destroy_plan(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

void release_states(std::map<int, DeviceState>& states) {
  for (auto& [device, s] : states) {
    for (auto& [key, p] : s.plans) destroy_plan(p);
    if (s.workspace) s.allocator->release(s.workspace, kWorkspaceBytes);
    if (s.handle) cublasLtDestroy(s.handle);
  }
  states.clear();
}

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::BiasGelu: return "bias+gelu";
  }
  return "?";
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
              const std::string& context) {
  check_lt(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value),
           "cublasLtMatmulDescSetAttribute", context);
}

std::vector<cublasLtMatmulHeuristicResult_t> describe_and_rank(Plan& p, cublasLtHandle_t handle,
                                                               const PlanKey& key, int count,
                                                               const std::string& context);

void fill_plan(Plan& p, cublasLtHandle_t handle, const PlanKey& key, const std::string& context) {
  p.algo = describe_and_rank(p, handle, key, 1, context)[0].algo;
}

// A plan for `key`; on any failure its descriptors are destroyed and the error names `context`.
Plan make_plan(cublasLtHandle_t handle, const PlanKey& key, const std::string& context) {
  Plan p;
  try {
    S3D_CHECK(!fault::hit(fault::Point::PlanBuild), "cuBLASLt plan build failed for ", context,
              " (injected fault)");
    fill_plan(p, handle, key, context);
  } catch (...) {
    destroy_plan(p);
    throw;
  }
  return p;
}

// The descriptors and layouts of `key` into `p`, then the heuristic's list of up to `count`
// algorithms, best first (its order is deterministic for a fixed library, GPU and shape).
std::vector<cublasLtMatmulHeuristicResult_t> describe_and_rank(Plan& p, cublasLtHandle_t handle,
                                                               const PlanKey& key, int count,
                                                               const std::string& context) {
  const cudaDataType_t type = key.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // fp32 accumulation and fp32 alpha/beta for both dtypes; COMPUTE_32F never uses TF32.
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate", context);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T), context);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_N), context);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (key.epilogue == Epilogue::Bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (key.epilogue == Epilogue::BiasGelu) epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, context);
  if (key.epilogue != Epilogue::None)
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(type), context);

  check_lt(cublasLtMatrixLayoutCreate(&p.a, type, key.k, key.n, key.k), "layout(A = W)", context);
  check_lt(cublasLtMatrixLayoutCreate(&p.b, type, key.k, key.m, key.k), "layout(B = x)", context);
  check_lt(cublasLtMatrixLayoutCreate(&p.d, type, key.n, key.m, key.n), "layout(D = y)", context);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", context);
  // Destroyed however this function leaves.
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_guard(pref, &cublasLtMatmulPreferenceDestroy);
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value),
             "cublasLtMatmulPreferenceSetAttribute", context);
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y);

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref,
                                                     count, results.data(), &found);
  check_lt(st, "cublasLtMatmulAlgoGetHeuristic", context);
  S3D_CHECK(found > 0, "cuBLASLt has no algorithm for ", context);
  results.resize(static_cast<size_t>(found));
  return results;
}

// The shape as the qualification cache keys it: everything of PlanKey but the device ordinal
// (the fingerprint names the GPU) and the tuned bit.
std::string shape_text(const PlanKey& key) {
  return cat(dtype_name(key.dtype), " M=", key.m, " N=", key.n, " K=", key.k, " ",
             epilogue_name(key.epilogue), " align ", key.align_x, "/", key.align_w, "/",
             key.align_y);
}

// The operands of one call, for timing the candidates on them.
struct Operands {
  const void* x;
  const void* w;
  const void* bias;
  void* y;
};

// The tuned plan of `key`: the stored choice when `store` holds one the heuristic's list still
// has, else (outside a capture) every candidate timed on `ops`. Nothing (a capture, no stored
// choice): the caller runs the default plan and counts the fallback.
std::optional<Plan> make_tuned_plan(cublasLtHandle_t handle, void* workspace, const PlanKey& key,
                                    const Operands& ops, plan_search::Store* store,
                                    const std::string& context) {
  using plan_search::Kind;
  Plan p;
  try {
    S3D_CHECK(!fault::hit(fault::Point::PlanBuild), "cuBLASLt plan build failed for ", context,
              " (injected fault)");
    const std::vector<cublasLtMatmulHeuristicResult_t> list =
        describe_and_rank(p, handle, key, plan_search::kMaxCandidates, context);
    const int count = static_cast<int>(list.size());
    const std::string shape = shape_text(key);
    if (store != nullptr) {
      if (std::optional<plan_search::Choice> c = store->find_plan(Kind::Gemm, shape)) {
        // The list is deterministic for the fingerprint the entry was taken under; a list of
        // another length means the index no longer names the same algorithm.
        if (c->candidates == count && c->index < count) {
          p.algo = list[static_cast<size_t>(c->index)].algo;
          plan_search::record({Kind::Gemm, shape, *c, plan_search::Source::Cache});
          return p;
        }
        store->refuse_plan(Kind::Gemm, shape,
                           cat("the stored choice is candidate ", c->index, " of ", c->candidates,
                               " but cuBLASLt now offers ", count, ": searching again"));
      }
    }
    const cudaStream_t stream = current_stream();
    if (plan_search::capturing(stream)) {
      destroy_plan(p);
      return std::nullopt;
    }
    if (ops.bias != nullptr)
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias,
                                              sizeof ops.bias),
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", context);
    const float alpha = 1.0f, beta = 0.0f;
    std::vector<double> ms(static_cast<size_t>(count), -1.0);
    for (int i = 0; i < count; ++i) {
      if (list[static_cast<size_t>(i)].state != CUBLAS_STATUS_SUCCESS) continue;
      const cublasLtMatmulAlgo_t& algo = list[static_cast<size_t>(i)].algo;
      // A candidate the library refuses for these operands is skipped, not an error.
      std::optional<double> t = plan_search::time_per_call(
          [&] {
            return cublasLtMatmul(handle, p.desc, &alpha, ops.w, p.a, ops.x, p.b, &beta, ops.y,
                                  p.d, ops.y, p.d, &algo, workspace, kWorkspaceBytes,
                                  stream) == CUBLAS_STATUS_SUCCESS;
          },
          stream);
      if (t) ms[static_cast<size_t>(i)] = *t;
    }
    const int best = plan_search::choose(ms, 0);
    S3D_CHECK(best >= 0, "cuBLASLt: none of the ", count, " candidate algorithms ran for ",
              context);
    plan_search::Choice c;
    c.index = best;
    c.candidates = count;
    c.timed = static_cast<int>(std::count_if(ms.begin(), ms.end(), [](double v) { return v >= 0; }));
    c.best_ms = ms[static_cast<size_t>(best)];
    c.default_ms = ms[0] >= 0 ? ms[0] : c.best_ms;
    p.algo = list[static_cast<size_t>(best)].algo;
    if (store != nullptr) store->store_plan(Kind::Gemm, shape, c);
    plan_search::record({Kind::Gemm, shape, c, plan_search::Source::Searched});
    return p;
  } catch (...) {
    destroy_plan(p);
    throw;
  }
}

}  // namespace

namespace detail {

void linear_cublaslt(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y,
                     Epilogue epilogue, plan_search::Search search) {
  int device = 0;
  S3D_CUDA_CHECK(cudaGetDevice(&device));
  DeviceState& s = device_state(device);
  PlanKey key{device,
              x.size(0),
              weight.size(0),
              x.size(1),
              x.dtype(),
              epilogue,
              alignment_of(x.data()),
              alignment_of(weight.data()),
              alignment_of(y.data())};
  auto context = [&] {
    return cat("linear ", dtype_name(key.dtype), " M=", key.m, " N=", key.n, " K=", key.k,
               " epilogue ", epilogue_name(epilogue), " (alignment x ", key.align_x, ", W ",
               key.align_w, ", y ", key.align_y, " bytes)");
  };
  const Operands ops{x.data(), weight.data(), bias ? bias->data() : nullptr, y.data()};
  key.tuned = search.on;
  // The search runs the product ten-odd times into y: the row's rule refuses an output that
  // overlaps an input (it would feed its own results back in).
  S3D_CHECK(!key.tuned || !output_overlaps_input(x, weight, bias, y),
            "linear: a searched GEMM's output overlaps an input (", context(), ")");
  auto it = s.plans.find(key);
  if (it == s.plans.end() && key.tuned) {
    std::optional<Plan> tuned;
    {
      FirstUseTimer timer("gemm_plan_search");
      tuned = make_tuned_plan(s.handle, s.workspace, key, ops, search.store, context());
    }
    if (tuned) {
      it = s.plans.emplace(key, *tuned).first;
    } else {
      // The engine runs each step kind once eagerly before capturing it, so a shape first
      // seen inside a capture is unexpected; it is counted, never timed there.
      record_fallback(sparse3d::Flag::tuned_gemm,
                      "a GEMM shape was first seen during CUDA graph capture, where candidates "
                      "cannot be timed; ran the heuristic's default algorithm");
      key.tuned = false;
      it = s.plans.find(key);
    }
  }
  if (it == s.plans.end()) {
    FirstUseTimer timer("gemm_plan");
    it = s.plans.emplace(key, make_plan(s.handle, key, context())).first;
  }
  const Plan& p = it->second;

  if (bias != nullptr) {
    const void* bias_ptr = bias->data();
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                            sizeof bias_ptr),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", context());
  }
  const float alpha = 1.0f, beta = 0.0f;
  before_library_write(y.data(), static_cast<size_t>(key.m * key.n) * dtype_size(key.dtype));
  cublasStatus_t st =
      cublasLtMatmul(s.handle, p.desc, &alpha, weight.data(), p.a, x.data(), p.b, &beta, y.data(),
                     p.d, y.data(), p.d, &p.algo, s.workspace, kWorkspaceBytes, current_stream());
  if (st != CUBLAS_STATUS_SUCCESS) check_lt(st, "cublasLtMatmul", context());
  count_library_call("gemm");
}

void release_cublaslt() { release_states(all_states()); }

size_t release_cublaslt_workspaces() {
  size_t released = 0;
  for (auto& [device, s] : all_states()) {
    if (s.workspace == nullptr) continue;
    s.allocator->release(s.workspace, kWorkspaceBytes);
    s.workspace = nullptr;
    released += kWorkspaceBytes;
  }
  return released;
}

}  // namespace detail

std::string cublaslt_version() {
  if (!cuda_available()) return "none";
  const size_t v = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace s3d::gemm
