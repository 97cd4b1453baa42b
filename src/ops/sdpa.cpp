#include "ops/sdpa.h"

#include <cmath>
#include <vector>

namespace s3d::ops {
namespace {

struct Args {
  const RowView& q;
  const attention::SeqLayout& q_layout;
  const RowView& k;
  const RowView& v;
  const attention::SeqLayout& kv_layout;
  int heads, head_dim;
  float scale;
  Tensor& out;
  attention::Config config;  // the plan's implementation and store; search off
};

void reference(Args& a) {
  attention::sdpa_varlen(a.q, a.q_layout, a.k, a.v, a.kv_layout, a.heads, a.head_dim, a.scale,
                         a.out, a.config);
}

// Lengths of `batch` sequences summing to `tokens` (>= batch), unequal: the last takes the
// rest.
std::vector<int32_t> ragged_lengths(int64_t tokens, int batch) {
  std::vector<int32_t> l(static_cast<size_t>(batch), static_cast<int32_t>(tokens / (batch + 1)));
  l.back() = static_cast<int32_t>(tokens - tokens / (batch + 1) * (batch - 1));
  return l;
}

// A packed [T, 3C] QKV of random values (self-attention, as the trunk's), `batch` ragged
// sequences.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::sdpa, &reference),
        heads_(s.heads),
        head_dim_(s.head_dim),
        qkv_(random_tensor({s.tokens, 3 * s.channels()}, DType::BF16, dev, seed, 1.0f)),
        out_(Tensor::empty({s.tokens, s.channels()}, DType::BF16, dev)),
        layout_(attention::make_seq_layout(ragged_lengths(s.tokens, s.batch), dev)),
        q_(RowView::columns(qkv_, 0, s.channels())),
        k_(RowView::columns(qkv_, s.channels(), s.channels())),
        v_(RowView::columns(qkv_, 2 * s.channels(), s.channels())) {}

 private:
  Args operands() override {
    return Args{q_, layout_, k_, v_, layout_, heads_, head_dim_,
                1.0f / std::sqrt(static_cast<float>(head_dim_)), out_, {}};
  }
  void reset() override { out_.poison(); }
  Tensor output(const Args&) const override { return out_; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    sdpa(plan, a.q, a.q_layout, a.k, a.v, a.kv_layout, a.heads, a.head_dim, a.scale, a.out);
    return out_;
  }
  int heads_, head_dim_;
  Tensor qkv_, out_;
  attention::SeqLayout layout_;
  RowView q_, k_, v_;
};

}  // namespace

void sdpa(const OpPlan& plan, const RowView& q, const attention::SeqLayout& q_layout,
          const RowView& k, const RowView& v, const attention::SeqLayout& kv_layout, int heads,
          int head_dim, float scale, Tensor& out) {
  Args a{q,     q_layout, k,   v, kv_layout, heads, head_dim,
         scale, out,      {plan.sdpa_implementation(), {false, plan.plan_store()}}};
  run_ladder(OpId::sdpa, plan, &reference, a);
}

OpInfo sdpa_row() {
  using sparse3d::Flag;
  return OpInfo{
      OpId::sdpa,
      "sdpa",
      "softmax(scale q k^T) v per head over ragged sequences, every attention of the model",
      "cuDNN SDPA with its heuristic's execution plan (the fp32 loop on the CPU), as PyTorch's "
      "flash-attention varlen call",
      {candidate<Args>(
          Flag::tuned_attention, Contract::Tolerance, 1e-2,
          "attention::sdpa_varlen(..., Config{implementation, Search{true, store}})",
          [](const Args&) { return std::string(); },
          [](Args& a) {
            attention::Config c = a.config;
            c.search.on = true;
            attention::sdpa_varlen(a.q, a.q_layout, a.k, a.v, a.kv_layout, a.heads, a.head_dim,
                                   a.scale, a.out, c);
          })},
      [](const OpShape& s) {
        const double T = double(s.tokens), C = double(s.channels());
        return 2 * (3 * T * C + T * C) + 8.0 * (s.batch + 1);
      },
      // Two and three ragged sequences, one token; head_dim 16, 24, 32.
      {{37, 3, 16, 2, 0}, {1, 2, 24, 1, 0}, {129, 2, 32, 3, 0}},
      &make_case_of<Case>};
}

}  // namespace s3d::ops
