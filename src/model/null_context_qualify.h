// Start-up qualification of the null-context fast paths (article section 7.3; docs/CONTRACTS.md,
// "Null-context elimination"). Two questions, answered per target layer by comparing raw bf16 bits
// (never a tolerance) at the production-equivalent shapes configured for the worker:
//   rows:   does the cached row c = to_out(canonical M rows of v0)[0] equal every
//           unconditional row of the reference projection, to_out at [N, C] (serial CFG) and
//           the null half of to_out at [2N, C] (batched CFG)? The smallest candidate M that
//           passes on every layer and shape is kept; none passing means no cache.
//           In batched CFG the cache path also projects the conditional rows alone: the
//           [N, C] to_out must be bitwise the conditional slice of the [2N, C] one.
//   slices: batched CFG with a symbolic null runs the conditional assets' to_q and to_kv at
//           half the reference M (both null paths); is the [N] projection bitwise the
//           conditional slice of the [2N] one (to_kv: N = context rows, zero rows below)?
// A result is valid only for the environment fingerprint and the weights version it was
// taken with.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "contract/fingerprint.h"
#include "core/tensor.h"
#include "model/trunk/transformer.h"
#include "ops/op.h"

namespace s3d::model {

// y = x W^T + b at x's shape for a layer in its weight format: ops::linear in production;
// tests inject a stub whose rounding depends on M so that both the pass and the fail branch
// run.
using Projection = std::function<void(const Tensor& x, const Linear& layer, Tensor& y)>;

// Every candidate's cached row c_i(M) of every block: made once per NullContext and shared
// by its qualifications (they depend on the weights and M only, not on N).
struct CandidateRows {
  std::vector<int64_t> ms;                          // sorted, distinct
  std::vector<Tensor> tables;                       // per block: bf16 [ms.size(), C]
  std::map<int64_t, std::vector<Tensor>> by_m;      // M -> per block bf16 [1, C]
};

struct QualificationOptions {
  std::vector<int64_t> candidate_m = {1, 64, 128, 256, 512, 1024};
  // Tokens per CFG branch (N); the reference shapes are [N, C] and [2N, C].
  std::vector<int64_t> token_counts = {3664, 30227};
  // Condition rows per branch (B x L) for the to_kv slice check.
  std::vector<int64_t> context_rows = {4101};
  bool serial = true;   // check the [N, C] serial-CFG reference
  bool batched = true;  // check the [2N, C] batched-CFG reference and the slices
  uint64_t seed = 0x9e11;
  // The plan of the requests this qualifies (their GEMMs' algorithm: the `linear` op's
  // candidates); the probe's condition transform and attention run under it too.
  ops::OpPlan ops;
  Projection projection;  // empty: ops::linear under `ops`
  // Test hook: called on each candidate cached row before it is compared (e.g. to flip a bit
  // and force the failure branch).
  std::function<void(int block, Tensor& row)> tamper_cached_row;
  // Candidate rows made earlier for candidate_m (make_candidate_rows); null: made here.
  const CandidateRows* candidates = nullptr;
};

struct CandidateResult {
  int64_t m = 0;
  bool passed = false;
  std::string failure;  // the first mismatch (layer, shape, column), empty if passed
};

struct Qualification {
  bool ran = false;
  // rows
  bool rows_checked = false;
  int64_t m = 0;  // smallest M that passed every layer and shape; 0 = none
  std::vector<CandidateResult> candidates;
  std::vector<Tensor> cached_rows;  // c_i at M, bf16 [1, C] on the model's device
  // slices (batched CFG)
  bool slices_checked = false;
  bool slices_ok = false;
  std::string slice_failure;
  bool kv_checked = false;  // the to_kv slice (per L, not per N) was among the slices
  std::string kv_failure;   // its first difference, empty when bitwise
  // validity
  contract::Fingerprint fingerprint;
  uint64_t weights_version = 0;
  QualificationOptions options;  // what was checked (without the callbacks' meaning)

  // Empty when this result applies to the given environment and weights; else why not.
  std::string invalid_reason(const contract::Fingerprint& fp, uint64_t weights_version) const;
  // "M=256 (failed: 1, 64, 128; passed: 256, 512)" or "no M passed (...)".
  std::string summary() const;
};

// Runs the checks. value_rows: v0 per block (null_context.h). check_rows: search M and build
// the cache; check_slices: the batched-CFG slice checks (when options.batched).
Qualification qualify_null_context(const Transformer& model,
                                   const std::vector<Tensor>& value_rows,
                                   const QualificationOptions& options, bool check_rows,
                                   bool check_slices);

// The candidate rows for options.candidate_m (options.projection, tamper_cached_row apply).
CandidateRows make_candidate_rows(const Transformer& model,
                                  const std::vector<Tensor>& value_rows,
                                  const QualificationOptions& options);

// A qualification taken earlier (the engine's cache stores what was decided, not tensors):
// recomputes its cached rows, c_i = canonical_row(v0_i, q.m) per block with the production
// projection, exactly as qualify_null_context made them.
// `plan`: the requests' op plan, as the qualification had it (QualificationOptions::ops).
void restore_cached_rows(const ops::OpPlan& plan, const Transformer& model,
                         const std::vector<Tensor>& value_rows,
                         Qualification& q);

// The cached row: to_out applied to M rows all equal to v0, first row kept. bf16 [1, C].
Tensor canonical_row(const Projection& projection, const Tensor& v0, int64_t m,
                     const Linear& to_out);

// Empty when a result taken with (taken_fp, taken_version) applies to (fp, version); else why
// not (a weight reload, another GPU or library version).
std::string validity_problem(const contract::Fingerprint& taken_fp, uint64_t taken_version,
                             const contract::Fingerprint& fp, uint64_t version);

// True when the two same-shaped bf16 tensors hold identical 16-bit patterns.
bool bits_equal(const Tensor& a, const Tensor& b);

}  // namespace s3d::model
