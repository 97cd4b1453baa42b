#include "ops/gated_residual_add.h"

#include "kernels/gated_residual_add.h"

namespace s3d::ops {
namespace {

struct Args {
  const Tensor& x;
  const Tensor& h;
  RowView gate;
  const Tensor& batch_index;
  Tensor& out;
};

void reference(Args& a) {
  kernels::reference::gated_residual_add(a.x, a.h, a.gate, a.batch_index, a.out);
}

// Random operands; the gate is a chunk of a [B, 6C] modulation, as in the model.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::gated_residual_add, &reference),
        x_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed, 2.0f)),
        h_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed + 1, 1.0f)),
        mod_(random_tensor({s.batch, 6 * s.channels()}, DType::BF16, dev, seed + 2, 0.5f)),
        batch_index_(spread_batch_index(s.tokens, s.batch, dev)),
        out_(Tensor::empty({s.tokens, s.channels()}, DType::BF16, dev)) {}

 private:
  Args operands() override {
    return Args{x_, h_, RowView::columns(mod_, 2 * x_.size(1), x_.size(1)), batch_index_, out_};
  }
  void reset() override { out_.poison(); }
  Tensor output(const Args&) const override { return out_; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    gated_residual_add(plan, a.x, a.h, a.gate, a.batch_index, a.out);
    return out_;
  }
  Tensor x_, h_, mod_, batch_index_, out_;
};

}  // namespace

void gated_residual_add(const OpPlan& plan, const Tensor& x, const Tensor& h,
                        const RowView& gate, const Tensor& batch_index, Tensor& out) {
  Args a{x, h, gate, batch_index, out};
  run_ladder(OpId::gated_residual_add, plan, &reference, a);
}

OpInfo gated_residual_add_row() {
  return OpInfo{OpId::gated_residual_add,
                "gated_residual_add",
                "bf16(x + bf16(h * gate[b])), the residual of the attention and MLP branches",
                "gather_rows, mul, add (2 [T, C] temporaries)",
                {candidate<Args>(
                    sparse3d::Flag::gated_residual_add, Contract::Bitwise, 0,
                    "kernels::fused::gated_residual_add",
                    [](const Args& a) {
                      return kernels::fused::gated_residual_add_unsupported(a.x, a.h, a.gate,
                                                                            a.out);
                    },
                    [](Args& a) {
                      kernels::fused::gated_residual_add(a.x, a.h, a.gate, a.batch_index, a.out);
                    })},
                [](const OpShape& s) {
                  return double(s.tokens) * s.channels() * 2 * 3 + double(s.tokens) * 4;
                },
                // C = 48, C = 36 (not 16-byte chunks: the candidate refuses), one token.
                {{37, 3, 16, 2, 0}, {1, 2, 24, 1, 0}, {129, 3, 12, 3, 0}},
                &make_case_of<Case>};
}

}  // namespace s3d::ops
