#include "model/null_context.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

#include "attention/attention.h"
#include "contract/fallback.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/elementwise.h"
#include "kernels/row_match.h"
#include "ops/sdpa.h"

namespace s3d::model {
namespace {

// The condition-side transform of block i on the null condition (L zero rows).
Transformer::CrossKV null_kv(const Transformer& m, int i, const NullContextOptions& o, int L) {
  Tensor zeros = Tensor::zeros({L, m.config().cond_channels}, DType::BF16, m.device());
  Transformer::CrossKV kv = m.condition_kv(o.qualification.ops, i, zeros);
  if (o.condition_transform) o.condition_transform(i, kv.kv);
  return kv;
}

// v0 of block i: the first value row of its null condition, bf16 [1, C].
Tensor first_value_row(const Transformer& m, const Transformer::CrossKV& kv) {
  const int64_t C = m.config().model_channels;
  Tensor v0 = Tensor::empty({1, C}, DType::BF16, m.device());
  RowView v0_view = RowView::of(v0);
  kernels::copy_rows(RowView{kv.kv, C, 1, C, 2 * C}, v0_view);
  return v0;
}

Tensor value_row(const Transformer& m, int i, const NullContextOptions& o, int L) {
  return first_value_row(m, null_kv(m, i, o, L));
}

// Runs the condition-side transform of block i on the null condition (L zero rows), queues
// the two checks into slots 2i (value rows vs v0) and 2i + 1 (the null cross-attention at
// random queries vs v0) of `slots` (kernels/row_match.h: compared on the device, read back
// once for all blocks), and returns v0 (bf16 [1, C]).
Tensor probe_block(const Transformer& m, int i, const NullContextOptions& o, int L,
                   Tensor& slots) {
  const ModelConfig& c = m.config();
  const int64_t C = c.model_channels;
  const Device dev = m.device();
  Transformer::CrossKV kv = null_kv(m, i, o, L);
  Tensor v0 = first_value_row(m, kv);
  kernels::first_row_mismatch(RowView{kv.kv, C, L, C, 2 * C}, RowView::of(v0), slots, 2 * i);

  const int64_t P = o.probe_queries;
  std::vector<float> qv(static_cast<size_t>(P * C));
  normal_fill(o.seed ^ static_cast<uint64_t>(i), 0, qv.size(), qv.data());
  Tensor q = Tensor::from_floats(qv, {P, C}, DType::BF16).to(dev);
  RowView k = c.qk_rms_norm_cross ? RowView::of(kv.k_normed.reshape({L, C}))
                                  : RowView{kv.kv, 0, L, C, 2 * C};
  attention::SeqLayout q_layout = attention::make_seq_layout({static_cast<int32_t>(P)}, dev);
  attention::SeqLayout kv_layout = attention::make_seq_layout({L}, dev);
  Tensor out = Tensor::empty({P, C}, DType::BF16, dev);
  ops::sdpa(o.qualification.ops, RowView::of(q), q_layout, k, RowView{kv.kv, C, L, C, 2 * C},
            kv_layout, c.num_heads, c.head_dim(),
            static_cast<float>(1.0 / std::sqrt(double(c.head_dim()))), out);
  kernels::first_row_mismatch(RowView::of(out), RowView::of(v0), slots, 2 * i + 1);
  return v0;
}

}  // namespace

const contract::Fingerprint& current_fingerprint() {
  return contract::context_fingerprint();
}

Applicability judge_applicability(const NullContextFacts& f, const std::vector<BlockProbe>& blocks) {
  Applicability a;
  a.facts.push_back(cat("attention dropout: ", f.attention_dropout));
  a.facts.push_back(cat("context tokens (L): ", f.context_tokens));
  a.facts.push_back(f.joint_attention ? "joint attention: context and shape tokens share one softmax"
                                      : "separate cross-attention: softmax over the context only");
  auto refuse = [&](std::string why) {
    if (a.reason.empty()) a.reason = std::move(why);
  };
  if (f.attention_dropout != 0.0)
    refuse(cat("attention dropout is ", f.attention_dropout, ": the output rows are not v0"));
  if (f.context_tokens < 1)
    refuse("no valid context token (L = 0): the null attention has nothing to average");
  if (f.joint_attention)
    refuse("joint attention: removing the context changes the shape tokens' softmax");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockProbe& b = blocks[i];
    if (b.differing_value_row >= 0)
      refuse(cat("block ", i, ": the value rows of the null condition differ after the "
                 "condition-side transform (", b.difference, ")"));
    else if (b.differing_attention_row >= 0)
      refuse(cat("block ", i, ": the null cross-attention output is not v0 (", b.difference, ")"));
  }
  if (f.context_tokens >= 1 && blocks.empty()) refuse("no block was probed");
  a.facts.push_back(cat(blocks.size(), " blocks probed: value rows identical and attention "
                        "output = v0 in ",
                        std::count_if(blocks.begin(), blocks.end(),
                                      [](const BlockProbe& b) {
                                        return b.differing_value_row < 0 &&
                                               b.differing_attention_row < 0;
                                      })));
  a.ok = a.reason.empty();
  return a;
}

std::string verdict_problem(const Applicability& v, const ModelConfig& c,
                            const NullContextOptions& o) {
  // The facts depend on the model and L alone, except the count of blocks that passed.
  NullContextFacts facts;
  facts.context_tokens = o.context_tokens;
  const int blocks = facts.context_tokens >= 1 ? c.num_blocks : 0;
  const auto facts_with = [&](int passed) {
    std::vector<BlockProbe> probes(static_cast<size_t>(blocks));
    for (int i = passed; i < blocks; ++i) probes[static_cast<size_t>(i)].differing_value_row = 1;
    return judge_applicability(facts, probes);
  };
  const Applicability all_pass = facts_with(blocks);
  if (v.ok || !all_pass.ok) {
    // A passing probe (or a refusal decided by the facts alone) has exactly one form.
    if (v.ok != all_pass.ok || v.reason != all_pass.reason || v.facts != all_pass.facts)
      return cat("it is not the verdict a probe of this model gives when ",
                 all_pass.ok ? "every block passes" : "its facts refuse it");
    return "";
  }
  // A refusal names the first block that failed, what differed and where: "block i: the
  // value rows ... (row r column k: bits 0x.. vs 0x..)" or "block i: the null
  // cross-attention output is not v0 (...)"; the value rows' r is a row of the L-row null
  // condition other than row 0 (v0 itself), the attention's one of the probe's queries.
  static const std::regex form(
      "block (\\d{1,9}): (the value rows of the null condition differ after the condition-side "
      "transform|the null cross-attention output is not v0) \\(row (\\d{1,10}) column "
      "(\\d{1,10}): bits 0x[0-9a-f]{1,4} vs 0x[0-9a-f]{1,4}\\)");
  std::smatch m;
  if (v.reason.size() > 512 || !std::regex_match(v.reason, m, form))
    return "its reason is not one the probe gives";
  const int64_t block = std::stoll(m[1]), row = std::stoll(m[3]), column = std::stoll(m[4]);
  const bool value_rows = m[2].str().rfind("the value rows", 0) == 0;
  const int64_t rows = value_rows ? o.context_tokens : o.probe_queries;
  if (block >= blocks || row < (value_rows ? 1 : 0) || row >= rows || column >= c.model_channels)
    return cat("its reason names block ", block, " row ", row, " column ", column,
               ", outside the model's ", blocks, " blocks, ", rows, " rows and ",
               c.model_channels, " columns");
  // Blocks before the one named passed; any after it may have.
  for (int passed = static_cast<int>(block); passed < blocks; ++passed)
    if (v.facts == facts_with(passed).facts) return "";
  return "its facts are not those of the probe that gave its reason";
}

NullContext NullContext::build(const Transformer& model, const NullContextOptions& o) {
  S3D_CHECK(o.probe_queries >= 1, "null context: probe_queries must be >= 1, got ",
            o.probe_queries);
  NullContextFacts facts;
  facts.context_tokens = o.context_tokens;
  if (o.adjust_facts) o.adjust_facts(facts);
  NullContext nc;
  nc.fingerprint_ = current_fingerprint();
  nc.weights_version_ = model.weights_version();
  std::vector<BlockProbe> probes;
  if (o.trusted && facts.context_tokens >= 1) {
    for (int i = 0; i < model.config().num_blocks; ++i)
      nc.value_rows_.push_back(value_row(model, i, o, facts.context_tokens));
    nc.applicability_ = *o.trusted;
  } else {
    if (facts.context_tokens >= 1) {
      const int blocks = model.config().num_blocks;
      const int64_t C = model.config().model_channels;
      Tensor slots = kernels::mismatch_slots(2 * int64_t{blocks}, model.device());
      for (int i = 0; i < blocks; ++i)
        nc.value_rows_.push_back(probe_block(model, i, o, facts.context_tokens, slots));
      const Tensor answers = slots.to(Device::CPU);
      for (int i = 0; i < blocks; ++i) {
        BlockProbe b;
        const kernels::Mismatch value = kernels::read_mismatch(answers, 2 * i, C);
        const kernels::Mismatch attention = kernels::read_mismatch(answers, 2 * i + 1, C);
        if (value.found()) {
          b.differing_value_row = value.row;
          b.difference = value.describe();
        } else if (attention.found()) {
          b.differing_attention_row = attention.row;
          b.difference = attention.describe();
        }
        probes.push_back(b);
      }
    }
    nc.applicability_ = judge_applicability(facts, probes);
  }
  if (nc.applicability_.ok && (o.qualify_cache || o.qualify_slices)) {
    nc.qualification_ = qualify_null_context(model, nc.value_rows_, o.qualification,
                                             o.qualify_cache, o.qualify_slices);
    for (int64_t n : o.qualification.token_counts) {
      if (o.qualification.serial) nc.add_qualification(n, false, nc.qualification_);
      if (o.qualification.batched) nc.add_qualification(n, true, nc.qualification_);
    }
  }
  return nc;
}

const CandidateRows& NullContext::candidates(const Transformer& model,
                                            const QualificationOptions& o) {
  std::vector<int64_t> ms = o.candidate_m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  if (!candidates_ || candidates_->ms != ms)
    candidates_ = std::make_unique<CandidateRows>(make_candidate_rows(model, value_rows_, o));
  return *candidates_;
}

void NullContext::add_qualification(int64_t tokens, bool batched, Qualification q) {
  const std::pair<int64_t, bool> key{tokens, batched};
  if (by_tokens_.count(key) == 0) {
    if (order_.size() >= kMaxQualifications) {
      by_tokens_.erase(order_.front());
      order_.erase(order_.begin());
    }
    order_.push_back(key);
  }
  by_tokens_[key] = std::move(q);
}

NullPath NullContext::path_for(const Transformer& model, bool want_cache, bool batched,
                               int context_tokens, int64_t tokens) const {
  using sparse3d::Flag;
  const Flag opt = want_cache ? Flag::null_context_cache : Flag::null_context_exact;
  NullPath path;
  if (context_tokens < 1) {
    contract::record_fallback(opt, "the request has no context token (L = 0); ran pure_eager");
    return path;
  }
  const std::string stale = validity_problem(fingerprint_, weights_version_, current_fingerprint(),
                                             model.weights_version());
  if (!stale.empty()) {
    contract::record_fallback(opt, "null context " + stale + "; ran pure_eager");
    return path;
  }
  if (!applicability_.ok) {
    contract::record_fallback(opt, "not applicable: " + applicability_.reason + "; ran pure_eager");
    return path;
  }
  const auto found = by_tokens_.find({tokens, batched});
  const Qualification& q = found != by_tokens_.end() ? found->second : qualification_;
  std::string invalid = q.invalid_reason(current_fingerprint(), model.weights_version());
  if (tokens >= 0 && found == by_tokens_.end())
    invalid = cat("the request's ", tokens, " tokens per CFG branch were not qualified for ",
                  batched ? "batched" : "serial", " CFG");
  if (batched) {
    std::string why = invalid;
    if (why.empty() && !q.slices_checked)
      why = "batched CFG slice checks were not run (build with qualify_slices)";
    if (why.empty() && !q.slices_ok) why = "batched CFG: " + q.slice_failure;
    if (!why.empty()) {
      contract::record_fallback(opt, why + "; ran pure_eager");
      return path;
    }
  }
  path.mode = NullContextMode::Exact;
  path.rows = value_rows_;
  if (!want_cache) return path;
  std::string why = invalid;
  if (why.empty() && !q.rows_checked) why = "the cached row was not qualified (qualify_cache off)";
  if (why.empty() && q.m == 0) {
    why = "no candidate M reproduced the reference bits: " + q.summary();
    if (!q.candidates.empty()) why += "; largest M: " + q.candidates.back().failure;
  }
  if (why.empty() && batched && !q.options.batched) why = "batched CFG shapes were not qualified";
  if (why.empty() && !batched && !q.options.serial) why = "serial CFG shapes were not qualified";
  if (!why.empty()) {
    contract::record_fallback(
        opt, why + "; ran " + std::string(sparse3d::name(Flag::null_context_exact)));
    return path;
  }
  path.mode = NullContextMode::Cache;
  path.rows = q.cached_rows;
  return path;
}

std::string NullContext::report() const {
  std::string s = cat("null context: ", applicability_.ok ? "applicable" : "refused: " + applicability_.reason, "\n");
  for (const auto& f : applicability_.facts) s += "  " + f + "\n";
  const Qualification& q = qualification_;
  if (!q.ran) return s + "  no shape qualified yet\n";
  if (q.rows_checked) {
    s += "  canonical cache: " + q.summary() + "\n";
    for (const auto& c : q.candidates)
      if (!c.passed) s += cat("    M=", c.m, " failed: ", c.failure, "\n");
  }
  if (q.slices_checked)
    s += q.slices_ok ? "  batched CFG slices: bitwise\n"
                     : "  batched CFG slices: differ: " + q.slice_failure + "\n";
  return s;
}

}  // namespace s3d::model
