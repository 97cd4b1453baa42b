#include "ops/qk_rmsnorm_cross.h"

#include "kernels/fast_norm.h"
#include "kernels/qk_rmsnorm.h"

namespace s3d::ops {
namespace {

struct Args {
  Tensor& q;
  const Tensor& gamma;
  int heads, head_dim;
  Tensor result;
  int64_t row() const { return int64_t{heads} * head_dim; }
};

void reference(Args& a) {
  a.result = kernels::reference::qk_rmsnorm_cross(a.q, a.gamma, a.heads, a.head_dim);
}

// Random q and gamma; the in-place candidates write into a working copy of q.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::qk_rmsnorm_cross, &reference),
        heads_(s.heads),
        head_dim_(s.head_dim),
        source_(random_tensor({s.tokens, s.channels()}, DType::BF16, dev, seed, 1.2f)),
        q_(Tensor::empty(source_.shape(), DType::BF16, dev)),
        gamma_(random_tensor({s.heads, s.head_dim}, DType::F32, dev, seed + 1, 0.2f, 1.0f)) {}

 private:
  Args operands() override { return Args{q_, gamma_, heads_, head_dim_, Tensor()}; }
  void reset() override { q_.copy_from(source_); }
  Tensor output(const Args& a) const override { return a.result; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    return qk_rmsnorm_cross(plan, a.q, a.gamma, a.heads, a.head_dim);
  }
  int heads_, head_dim_;
  Tensor source_, q_, gamma_;
};

}  // namespace

Tensor qk_rmsnorm_cross(const OpPlan& plan, Tensor& q, const Tensor& gamma, int heads,
                        int head_dim) {
  Args a{q, gamma, heads, head_dim, Tensor()};
  run_ladder(OpId::qk_rmsnorm_cross, plan, &reference, a);
  return a.result;
}

OpInfo qk_rmsnorm_cross_row() {
  using sparse3d::Flag;
  return OpInfo{OpId::qk_rmsnorm_cross,
                "qk_rmsnorm_cross",
                "per-head RMSNorm of the cross-attention's q",
                "head_rmsnorm of q into a new [T, H, D]",
                {candidate<Args>(
                     Flag::fast_qk_rmsnorm_cross, Contract::Tolerance, 1e-2,
                     "kernels::fast::qk_rmsnorm_cross",
                     [](const Args& a) {
                       return kernels::fast::qk_unsupported(a.q, a.row(), a.heads, a.head_dim,
                                                            &a.gamma, nullptr, nullptr, nullptr);
                     },
                     [](Args& a) {
                       kernels::fast::qk_rmsnorm_cross(a.q, a.gamma, a.heads, a.head_dim);
                       a.result = a.q;
                     }),
                 candidate<Args>(
                     Flag::qk_rmsnorm_cross_inplace, Contract::Bitwise, 0,
                     "kernels::fused::qk_rmsnorm_cross_inplace",
                     [](const Args& a) {
                       return kernels::fused::qk_unsupported(a.q, a.row(), a.heads, a.head_dim,
                                                             nullptr, nullptr);
                     },
                     [](Args& a) {
                       kernels::fused::qk_rmsnorm_cross_inplace(a.q, a.gamma, a.heads, a.head_dim);
                       a.result = a.q;
                     })},
                [](const OpShape& s) { return double(s.tokens) * s.channels() * 2 * 2; },
                head_test_shapes(),
                &make_case_of<Case>};
}

}  // namespace s3d::ops
