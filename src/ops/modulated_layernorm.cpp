#include "ops/modulated_layernorm.h"

#include "kernels/fast_norm.h"
#include "kernels/modulated_layernorm.h"

namespace s3d::ops {
namespace {

struct Args {
  const Tensor& x;
  RowView shift, scale;
  const Tensor& batch_index;
  float eps;
  Tensor& out;
};

void reference(Args& a) {
  kernels::reference::modulated_layernorm(a.x, a.shift, a.scale, a.batch_index, a.eps, a.out);
}

// Random operands: the modulation [B, 6C] as the model holds it, shift and scale two of its
// chunks, the tokens spread over the assets in order.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::modulated_layernorm, &reference),
        x_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed, 1.5f, 0.3f)),
        mod_(random_tensor({s.batch, 6 * s.channels()}, DType::BF16, dev, seed + 1, 0.4f)),
        batch_index_(spread_batch_index(s.tokens, s.batch, dev)),
        out_(Tensor::empty({s.tokens, s.channels()}, DType::BF16, dev)) {}

 private:
  static constexpr float kEps = 1e-6f;
  Args operands() override {
    const int64_t C = x_.size(1);
    return Args{x_, RowView::columns(mod_, 0, C), RowView::columns(mod_, C, C), batch_index_,
                kEps, out_};
  }
  void reset() override { out_.poison(); }
  Tensor output(const Args&) const override { return out_; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    modulated_layernorm(plan, a.x, a.shift, a.scale, a.batch_index, a.eps, a.out);
    return out_;
  }
  Tensor x_, mod_, batch_index_, out_;
};

}  // namespace

void modulated_layernorm(const OpPlan& plan, const Tensor& x, const RowView& shift,
                         const RowView& scale, const Tensor& batch_index, float eps,
                         Tensor& out) {
  Args a{x, shift, scale, batch_index, eps, out};
  run_ladder(OpId::modulated_layernorm, plan, &reference, a);
}

OpInfo modulated_layernorm_row() {
  using sparse3d::Flag;
  return OpInfo{
      OpId::modulated_layernorm,
      "modulated_layernorm",
      "bf16(LN(x) * (1 + scale[b]) + shift[b]), the AdaLN input of the attention and MLP",
      "layer_norm, add_scalar, gather_rows, mul, gather_rows, add (4 [T, C] temporaries)",
      {candidate<Args>(
           Flag::fast_modulated_layernorm, Contract::Tolerance, 1e-2,
           "kernels::fast::modulated_layernorm",
           [](const Args& a) {
             return kernels::fast::modulated_layernorm_unsupported(a.x, a.shift, a.scale, a.out);
           },
           [](Args& a) {
             kernels::fast::modulated_layernorm(a.x, a.shift, a.scale, a.batch_index, a.eps, a.out);
           }),
       candidate<Args>(
           Flag::modulated_layernorm, Contract::Bitwise, 0, "kernels::fused::modulated_layernorm",
           [](const Args& a) {
             return kernels::fused::modulated_layernorm_unsupported(a.x, a.shift, a.scale, a.out);
           },
           [](Args& a) {
             kernels::fused::modulated_layernorm(a.x, a.shift, a.scale, a.batch_index, a.eps,
                                                 a.out);
           })},
      [](const OpShape& s) {
        return double(s.tokens) * s.channels() * 2 * 2 + double(s.tokens) * 4;
      },
      // C = 48 (both candidates), C = 36 (not 16-byte chunks: both refuse), C = 4104 (past
      // one warp's registers: the tolerance kernel refuses, the bitwise one runs).
      {{37, 3, 16, 2, 0}, {1, 2, 24, 1, 0}, {129, 3, 12, 3, 0}, {5, 3, 1368, 2, 0}},
      &make_case_of<Case>};
}

}  // namespace s3d::ops
