#include "ops/linear.h"

namespace s3d::ops {
namespace {

struct Args {
  const Tensor& x;
  const Tensor& weight;
  const Tensor* bias;
  Tensor& y;
  gemm::Epilogue epilogue;
  plan_search::Store* store;
};

void reference(Args& a) { gemm::linear(a.x, a.weight, a.bias, a.y, a.epilogue); }

// Random x, weight and bias of a layer C -> hidden.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::linear, &reference),
        x_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed, 1.0f)),
        weight_(random_tensor({s.hidden, s.channels()}, DType::BF16, dev, seed + 1,
                              1.0f / static_cast<float>(s.channels()))),
        bias_(random_tensor({s.hidden}, DType::BF16, dev, seed + 2, 0.5f)),
        y_(Tensor::empty({s.tokens, s.hidden}, DType::BF16, dev)) {}

 private:
  Args operands() override {
    return Args{x_, weight_, &bias_, y_, gemm::Epilogue::Bias, nullptr};
  }
  void reset() override { y_.poison(); }
  Tensor output(const Args&) const override { return y_; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    linear(plan, a.x, a.weight, a.bias, a.y, a.epilogue);
    return y_;
  }
  Tensor x_, weight_, bias_, y_;
};

}  // namespace

void linear(const OpPlan& plan, const Tensor& x, const Tensor& weight, const Tensor* bias,
            Tensor& y, gemm::Epilogue epilogue) {
  Args a{x, weight, bias, y, epilogue, plan.plan_store()};
  run_ladder(OpId::linear, plan, &reference, a);
}

OpInfo linear_row() {
  using sparse3d::Flag;
  return OpInfo{
      OpId::linear,
      "linear",
      "x W^T + b, every linear layer of the model",
      "cuBLASLt's heuristic algorithm (the CPU loop on the CPU), as PyTorch's addmm",
      {candidate<Args>(
          Flag::tuned_gemm, Contract::Tolerance, 1e-2, "gemm::linear(..., Search{true, store})",
          [](const Args& a) -> std::string {
            if (gemm::output_overlaps_input(a.x, a.weight, a.bias, a.y))
              return "the GEMM's output overlaps an input, so its candidates cannot be timed in "
                     "place; ran the heuristic's default algorithm";
            return "";
          },
          [](Args& a) {
            gemm::linear(a.x, a.weight, a.bias, a.y, a.epilogue,
                         plan_search::Search{true, a.store});
          })},
      [](const OpShape& s) {
        const double C = double(s.channels()), N = double(s.hidden), T = double(s.tokens);
        return 2 * (T * C + N * C + N + T * N);
      },
      // K = 48, 48, 16; N odd-sized; one token.
      {{37, 3, 16, 1, 72}, {1, 2, 24, 1, 40}, {129, 2, 8, 1, 104}},
      &make_case_of<Case>};
}

}  // namespace s3d::ops
