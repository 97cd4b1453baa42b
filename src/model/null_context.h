// Null-context elimination (article section 2; docs/CONTRACTS.md "Null-context elimination"): with the null
// condition every value row of a block's cross-attention is the same row v0, so the
// unconditional branch's cross-attention output is v0 for every token, whatever the queries.
// NullContext is built once at start-up: it runs the condition-side transform on the null
// condition per block (on the model's device), checks the applicability rule instead of
// assuming it, keeps v0 per block, and (for the cache path) qualifies the cached row. Per
// request it picks the path, counting every refusal as a fallback.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/null_context_qualify.h"
#include "model/trunk/transformer.h"

namespace s3d::model {

// Model-level facts the transform depends on, as recorded in the applicability report.
struct NullContextFacts {
  double attention_dropout = 0.0;  // the engine is inference-only: no dropout anywhere
  bool joint_attention = false;    // cross_attn is its own softmax over the context tokens
  int context_tokens = 0;          // L of the null condition
};

// What the probe saw in one block.
struct BlockProbe {
  int64_t differing_value_row = -1;      // first V row of the null condition != row 0, or -1
  int64_t differing_attention_row = -1;  // first null cross-attention output row != v0, or -1
  std::string difference;                // the bits that differed
};

struct Applicability {
  bool ok = false;
  std::string reason;              // why refused; empty when ok
  std::vector<std::string> facts;  // the checks, in words, for the report
};

// The applicability rule: no attention dropout, at least one context token, separate
// (not joint) softmax, all value rows identical after the condition-side transform in every
// block, and the null cross-attention output equal to v0 (softmax rows summing to one).
Applicability judge_applicability(const NullContextFacts& facts,
                                  const std::vector<BlockProbe>& blocks);

struct NullContextOptions;

// Why `verdict` is not one the probe could have given for a model of this config with these
// options (its reason, its facts, the block, row, column and bits its reason names), or ""
// when it is. A verdict read back from the qualification cache must be one: the cache's
// checksum catches accidents, not a file written on purpose, and this at least keeps a
// written verdict to the outcomes a probe has (docs/RELIABILITY.md).
std::string verdict_problem(const Applicability& verdict, const ModelConfig& config,
                            const NullContextOptions& options);

struct NullContextOptions {
  int context_tokens = 16;  // rows of the null condition the probe transforms (L)
  int probe_queries = 64;   // random queries of the attention probe
  uint64_t seed = 0x0c0de;
  bool qualify_cache = false;   // search M and build the cached rows (canonical_cache_null)
  bool qualify_slices = false;  // batched-CFG slice checks (either path with batched_cfg)
  QualificationOptions qualification;
  // Test hooks. condition_transform: applied to to_kv's output [L, 2C] for the null
  // condition before the checks, standing in for a model whose condition side is not an
  // affine map of zero (a positional term on the context, say). adjust_facts: edits the
  // model facts (dropout, joint attention) to exercise each refusal.
  std::function<void(int block, Tensor& kv)> condition_transform;
  std::function<void(NullContextFacts&)> adjust_facts;
  // An applicability verdict taken earlier for this model, environment and L (the engine's
  // cache): v0 is still computed from the weights (the same condition transform), but the
  // row-by-row checks and the attention probe are not run again.
  const Applicability* trusted = nullptr;
};

class NullContext {
 public:
  static NullContext build(const Transformer& model, const NullContextOptions& options);

  const Applicability& applicability() const { return applicability_; }
  // The qualification build() ran (options.qualification's shapes), if any.
  const Qualification& qualification() const { return qualification_; }
  const std::vector<Tensor>& value_rows() const { return value_rows_; }  // v0_i, bf16 [1, C]

  // Qualifications per token count N (tokens per CFG branch) and CFG mode (batched or
  // serial: a request is qualified for the mode it runs, never for the other): build()'s for
  // each of its shapes, and those the engine adds per request. At most kMaxQualifications
  // are kept (the oldest forgotten first): a service meets a new N with nearly every asset,
  // and qualifying one again costs a few GEMMs on the device.
  static constexpr size_t kMaxQualifications = 512;
  bool qualified(int64_t tokens, bool batched) const {
    return by_tokens_.count({tokens, batched}) > 0;
  }
  void add_qualification(int64_t tokens, bool batched, Qualification q);
  const std::map<std::pair<int64_t, bool>, Qualification>& qualifications() const {
    return by_tokens_;
  }

  // The candidate rows for `o.candidate_m` under o's projection, made on first use and kept
  // (they depend on the weights and M only; a qualification per N reuses them).
  const CandidateRows& candidates(const Transformer& model, const QualificationOptions& o);
  // The to_kv slice check (batched CFG) depends on L, not N: its outcome per L once taken
  // ("" when bitwise), or nullptr when not yet.
  const std::string* kv_slice(int64_t context_rows) const {
    auto it = kv_slices_.find(context_rows);
    return it == kv_slices_.end() ? nullptr : &it->second;
  }
  void set_kv_slice(int64_t context_rows, std::string failure) {
    kv_slices_[context_rows] = std::move(failure);
  }

  // The path for one request, decided once per request outside the step loop. want_cache:
  // null_context_cache (else null_context_exact); batched: batched CFG; context_tokens: the
  // request's L; tokens: its N, whose qualification decides (-1: build()'s). Every refusal
  // is counted (contract/fallback.h): a refused cache falls back to the exact path, a
  // refused exact path to the reference (mode Reference). Everything here (v0 included) was
  // read from the weights in one environment: another weights version or fingerprint
  // refuses both paths.
  NullPath path_for(const Transformer& model, bool want_cache, bool batched,
                    int context_tokens, int64_t tokens = -1) const;

  // Lines for `run`: the applicability facts and the qualification summary.
  std::string report() const;

 private:
  Applicability applicability_;
  Qualification qualification_;
  std::map<std::pair<int64_t, bool>, Qualification> by_tokens_;
  std::vector<std::pair<int64_t, bool>> order_;  // by_tokens_'s keys, oldest first
  std::unique_ptr<CandidateRows> candidates_;
  std::map<int64_t, std::string> kv_slices_;
  std::vector<Tensor> value_rows_;
  contract::Fingerprint fingerprint_;
  uint64_t weights_version_ = 0;
};

// The process's environment fingerprint, taken once (qualification validity checks it per
// request).
const contract::Fingerprint& current_fingerprint();

}  // namespace s3d::model
