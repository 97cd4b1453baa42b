#include "ops/qk_rmsnorm_rope.h"

#include <cmath>
#include <vector>

#include "kernels/fast_norm.h"
#include "kernels/qk_rmsnorm.h"

namespace s3d::ops {
namespace {

struct Args {
  Tensor& qkv;
  int heads, head_dim;
  const Tensor *q_gamma, *k_gamma, *cos, *sin;
  Tensor result;  // what the attention reads
  int64_t row() const { return 3 * int64_t{heads} * head_dim; }
};

void reference(Args& a) {
  a.result = kernels::reference::qk_rmsnorm_rope(a.qkv, a.heads, a.head_dim, a.q_gamma,
                                                 a.k_gamma, a.cos, a.sin);
}

// RoPE tables of random phases (the cos and sin of one angle, as the model's tables).
void random_rope(const OpShape& s, Device dev, uint64_t seed, Tensor& cos, Tensor& sin) {
  const Tensor phase = random_tensor({s.tokens, s.head_dim / 2}, DType::F32, Device::CPU, seed,
                                     3.0f);
  std::vector<float> p = phase.to_floats(), c(p.size()), n(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    c[i] = std::cos(p[i]);
    n[i] = std::sin(p[i]);
  }
  cos = Tensor::from_floats(c, {s.tokens, s.head_dim / 2}, DType::F32).to(dev);
  sin = Tensor::from_floats(n, {s.tokens, s.head_dim / 2}, DType::F32).to(dev);
}

// Random packed QKV and gammas; the in-place candidates write into a working copy of the
// QKV, restored before each run.
class Case : public CaseOf<Args> {
 public:
  Case(const OpShape& s, Device dev, uint64_t seed)
      : CaseOf(OpId::qk_rmsnorm_rope, &reference),
        heads_(s.heads),
        head_dim_(s.head_dim),
        source_(random_tensor({s.tokens, 3 * s.channels()}, DType::BF16, dev, seed, 1.2f)),
        qkv_(Tensor::empty(source_.shape(), DType::BF16, dev)),
        q_gamma_(random_tensor({s.heads, s.head_dim}, DType::F32, dev, seed + 1, 0.2f, 1.0f)),
        k_gamma_(random_tensor({s.heads, s.head_dim}, DType::F32, dev, seed + 2, 0.2f, 1.0f)) {
    random_rope(s, dev, seed + 3, cos_, sin_);
  }

 private:
  Args operands() override {
    return Args{qkv_, heads_, head_dim_, &q_gamma_, &k_gamma_, &cos_, &sin_, Tensor()};
  }
  void reset() override { qkv_.copy_from(source_); }
  Tensor output(const Args& a) const override { return a.result; }
  Tensor call_op(const OpPlan& plan, Args& a) override {
    return qk_rmsnorm_rope(plan, a.qkv, a.heads, a.head_dim, a.q_gamma, a.k_gamma, a.cos, a.sin);
  }
  int heads_, head_dim_;
  Tensor source_, qkv_, q_gamma_, k_gamma_, cos_, sin_;
};

}  // namespace

Tensor qk_rmsnorm_rope(const OpPlan& plan, Tensor& qkv, int heads, int head_dim,
                       const Tensor* q_gamma, const Tensor* k_gamma, const Tensor* cos,
                       const Tensor* sin) {
  if (q_gamma == nullptr && cos == nullptr) return qkv;  // no qk_rms_norm, no RoPE
  Args a{qkv, heads, head_dim, q_gamma, k_gamma, cos, sin, Tensor()};
  run_ladder(OpId::qk_rmsnorm_rope, plan, &reference, a);
  return a.result;
}

OpInfo qk_rmsnorm_rope_row() {
  using sparse3d::Flag;
  return OpInfo{
      OpId::qk_rmsnorm_rope,
      "qk_rmsnorm_rope",
      "per-head RMSNorm and 3-D RoPE of q and k, in the packed [T, 3C] QKV",
      "head_rmsnorm and rope_apply for q and for k, the [T, 3C] restack (3 copy_rows)",
      {candidate<Args>(
           Flag::fast_qk_rmsnorm_rope, Contract::Tolerance, 1e-2, "kernels::fast::qk_rmsnorm_rope",
           [](const Args& a) {
             return kernels::fast::qk_unsupported(a.qkv, a.row(), a.heads, a.head_dim, a.q_gamma,
                                                  a.k_gamma, a.cos, a.sin);
           },
           [](Args& a) {
             kernels::fast::qk_rmsnorm_rope(a.qkv, a.heads, a.head_dim, a.q_gamma, a.k_gamma, a.cos,
                                            a.sin);
             a.result = a.qkv;
           }),
       candidate<Args>(
           Flag::qk_rmsnorm_rope_inplace, Contract::Bitwise, 0,
           "kernels::fused::qk_rmsnorm_rope_inplace",
           [](const Args& a) {
             return kernels::fused::qk_unsupported(a.qkv, a.row(), a.heads, a.head_dim, a.cos,
                                                   a.sin);
           },
           [](Args& a) {
             kernels::fused::qk_rmsnorm_rope_inplace(a.qkv, a.heads, a.head_dim, a.q_gamma,
                                                     a.k_gamma, a.cos, a.sin);
             a.result = a.qkv;
           })},
      [](const OpShape& s) {
        return double(s.tokens) * (2 * s.channels() * 2 * 2) +
               double(s.tokens) * (s.head_dim / 2) * 4 * 2;
      },
      head_test_shapes(),
      &make_case_of<Case>};
}

}  // namespace s3d::ops
