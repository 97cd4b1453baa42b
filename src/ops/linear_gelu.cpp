#include "ops/linear_gelu.h"

#include "ops/linear.h"
#include "ops/weight_format.h"
#include "kernels/elementwise.h"
#include "kernels/gelu_tanh.h"

namespace s3d::ops {
namespace {

struct Args {
  const Tensor& x;
  const LinearWeights& w;  // fc1, in its weight format
  Tensor& out;
  const OpPlan& plan;  // the GEMMs are the `linear` op's (its candidates, under this plan)
};

// The layer's product with its bias (its format's apply), rounded to a bf16 temporary of
// out's shape.
Tensor rounded_gemm(const Args& a) {
  Tensor u = Tensor::empty(a.out.shape(), a.out.dtype(), a.out.device());
  linear(a.plan, a.x, a.w, u);
  return u;
}

void reference(Args& a) { kernels::gelu_tanh(rounded_gemm(a), a.out); }

// Random x, weight and bias of an MLP's fc1 at width `hidden`.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::linear_gelu, &reference),
        x_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed, 1.0f)),
        weight_(random_tensor({s.hidden, s.channels()}, DType::BF16, dev, seed + 1,
                              1.0f / static_cast<float>(s.channels()))),
        bias_(random_tensor({s.hidden}, DType::BF16, dev, seed + 2, 0.5f)),
        out_(Tensor::empty({s.tokens, s.hidden}, DType::BF16, dev)),
        w_{&plain_format(), weight_, bias_, Tensor()} {}

 private:
  Args operands() override { return Args{x_, w_, out_, plan_}; }
  void reset() override { out_.poison(); }
  Tensor output(const Args&) const override { return out_; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    linear_gelu(plan, a.x, a.w, a.out);
    return out_;
  }
  Tensor x_, weight_, bias_, out_;
  LinearWeights w_;
  OpPlan plan_;  // the GEMMs' reference
};

}  // namespace

void linear_gelu(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& out) {
  Args a{x, w, out, plan};
  run_ladder(OpId::linear_gelu, plan, &reference, a);
}

void linear_gelu(const OpPlan& plan, const Tensor& x, const Tensor& weight, const Tensor* bias,
                 Tensor& out) {
  const LinearWeights w{&plain_format(), weight, bias ? *bias : Tensor(), Tensor()};
  linear_gelu(plan, x, w, out);
}

OpInfo linear_gelu_row() {
  using sparse3d::Flag;
  return OpInfo{
      OpId::linear_gelu,
      "linear_gelu",
      "GELU-tanh(x W^T + b), the MLP's fc1 and its activation",
      "the GEMM rounded to a bf16 [M, N] temporary, then the GELU map",
      {candidate<Args>(
           Flag::gemm_gelu_epilogue, Contract::Tolerance, 1e-2,
           "gemm::linear(..., Epilogue::BiasGelu)",
           [](const Args& a) -> std::string {
             if (a.w.bias_or_null() == nullptr)
               return "the layer has no bias (the GELU epilogue applies one)";
             if (a.w.format != &plain_format())
               return cat("the layer's weights are in format ", a.w.format->name,
                          ", whose product is not a bare GEMM");
             return "";
           },
           [](Args& a) {
             linear(a.plan, a.x, a.w.weight, a.w.bias_or_null(), a.out, gemm::Epilogue::BiasGelu);
           }),
       candidate<Args>(
           Flag::gelu_tanh, Contract::Bitwise, 0, "kernels::fused::gelu_tanh",
           [](const Args&) { return std::string(); },
           [](Args& a) { kernels::fused::gelu_tanh(rounded_gemm(a), a.out); })},
      [](const OpShape& s) {
        const double C = double(s.channels()), N = double(s.hidden), T = double(s.tokens);
        return 2 * (T * C + N * C + N + T * N);
      },
      {{37, 3, 16, 1, 72}, {1, 2, 24, 1, 40}, {129, 2, 8, 1, 100}},
      &make_case_of<Case>};
}

}  // namespace s3d::ops
