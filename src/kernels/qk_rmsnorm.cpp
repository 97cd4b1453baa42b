// q/k preparation: the reference chains, the fused
// kernels' support rule, argument checks and device dispatch, and their CPU version (the
// reference chain's arithmetic, element by element, written back in place).
#include "kernels/qk_rmsnorm.h"

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/qk_inplace.h"
#include "kernels/qk_rmsnorm_cuda.h"
#include "kernels/kernel_checks.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

using detail::aligned16;

}  // namespace

namespace cpu {

// Per (token, slot, head): the sum of squares in sequential order (as cpu::head_rmsnorm),
// y = bf16(norm apply), then the pairs rotated from the bf16 y and rounded again (as
// cpu::rope_apply).
void qk_inplace(Tensor& x, int64_t row_stride, int slots, int heads, int head_dim,
                const float* const* gamma, float scale, const float* cos, const float* sin) {
  uint16_t* base = x.data_as<uint16_t>();
  const int64_t T = x.size(0), H = heads, D = head_dim, half = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> y(static_cast<size_t>(D));
    for (int s = 0; s < slots; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        uint16_t* v = base + t * row_stride + (s * H + h) * D;
        if (gamma[s] != nullptr) {
          const float* g = gamma[s] + h * D;
          double sum_sq = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            const double f = bf16_to_float(v[d]);
            sum_sq += f * f;
          }
          const float norm = math::l2_norm_from_squares(sum_sq);
          for (int64_t d = 0; d < D; ++d)
            y[d] = round_bf16(math::head_rmsnorm_apply(bf16_to_float(v[d]), norm, g[d], scale));
        } else {
          for (int64_t d = 0; d < D; ++d) y[d] = bf16_to_float(v[d]);
        }
        if (cos != nullptr) {
          for (int64_t p = 0; p < half; ++p) {
            float re, im;
            math::rope_rotate(y[2 * p], y[2 * p + 1], cos[t * half + p], sin[t * half + p], re,
                              im);
            y[2 * p] = re;
            y[2 * p + 1] = im;
          }
        }
        for (int64_t d = 0; d < D; ++d) v[d] = float_to_bf16(y[d]);
      }
    }
  }
}

}  // namespace cpu

namespace fused {

std::string qk_unsupported(const Tensor& x, int64_t row_stride, int heads, int head_dim,
                           const Tensor* cos, const Tensor* sin) {
  if (x.dtype() != DType::BF16) return cat("x is ", x.describe(), ", not bf16");
  if (head_dim % 8 != 0)
    return cat("head_dim ", head_dim, " is not a multiple of 8 (one 16-byte chunk per lane)");
  if (row_stride % 8 != 0) return cat("row stride ", row_stride, " is not a multiple of 8");
  if (!aligned16(x.data())) return "q/k rows are not 16-byte aligned";
  if ((cos && !aligned16(cos->data())) || (sin && !aligned16(sin->data())))
    return "the RoPE tables are not 16-byte aligned";
  (void)heads;
  return "";
}

}  // namespace fused

namespace detail {
namespace {

// Validates and runs the family's kernel on the first `slots` C-wide slots of each row of x
// (the row holds x.size(1) >= slots * C elements; a third, untouched slot for the packed QKV).
void qk_slots_inplace(const char* op, const QkKernels& k, Tensor& x, int slots, int heads,
                      int head_dim, const Tensor* gamma0, const Tensor* gamma1,
                      const Tensor* cos, const Tensor* sin) {
  check_qk_operands(op, x, slots, heads, head_dim, gamma0, gamma1, cos, sin);
  const int64_t stride = x.size(1);
  const float scale = math::head_rmsnorm_scale(head_dim);
  const QkPointers p = qk_pointers(gamma0, gamma1, cos, sin);
  run_supported(
      op, k.unsupported(x, stride, heads, head_dim, gamma0, gamma1, cos, sin), x,
      [&] { k.cpu(x, stride, slots, heads, head_dim, p.gammas, scale, p.cos, p.sin); },
      [&] {
        k.cuda(x, stride, slots, heads, head_dim, p.gammas[0], p.gammas[1], scale, p.cos, p.sin);
      });
}

}  // namespace

void qk_packed_inplace(const char* op, const QkKernels& k, Tensor& qkv, int heads, int head_dim,
                       const Tensor* q_gamma, const Tensor* k_gamma, const Tensor* cos,
                       const Tensor* sin) {
  check_packed_qkv(op, qkv, heads, head_dim, q_gamma, k_gamma);
  // q and k are the first 2C columns of each 3C row; v is never touched.
  qk_slots_inplace(op, k, qkv, 2, heads, head_dim, q_gamma, k_gamma, cos, sin);
}

void qk_heads_inplace(const char* op, const QkKernels& k, Tensor& x, const Tensor& gamma,
                      int heads, int head_dim) {
  check_heads_row(op, x, heads, head_dim);
  qk_slots_inplace(op, k, x, 1, heads, head_dim, &gamma, nullptr, nullptr, nullptr);
}

}  // namespace detail

namespace fused {
namespace {

const detail::QkKernels kQk{
    [](const Tensor& x, int64_t row_stride, int heads, int head_dim, const Tensor*,
       const Tensor*, const Tensor* cos, const Tensor* sin) {
      return qk_unsupported(x, row_stride, heads, head_dim, cos, sin);
    },
    &cpu::qk_inplace, &cuda::qk_inplace};

}  // namespace

void qk_rmsnorm_rope_inplace(Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                             const Tensor* k_gamma, const Tensor* cos, const Tensor* sin) {
  detail::qk_packed_inplace("qk_rmsnorm_rope_inplace", kQk, qkv, heads, head_dim, q_gamma,
                            k_gamma, cos, sin);
}

void qk_rmsnorm_cross_inplace(Tensor& x, const Tensor& gamma, int heads, int head_dim) {
  detail::qk_heads_inplace("qk_rmsnorm_cross_inplace", kQk, x, gamma, heads, head_dim);
}

}  // namespace fused

namespace {

// pure_eager's q or k of the packed QKV: unbind -> RMSNorm (bf16 out; a copy without
// qk_rms_norm) -> RoPE (bf16 out), as the original.
Tensor prepare_head_slot(const RowView& slot, int heads, int head_dim, const Tensor* gamma,
                         const Tensor* cos, const Tensor* sin) {
  const int64_t T = slot.rows;
  const Device dev = slot.device();
  Tensor t = Tensor::empty({T, heads, head_dim}, DType::BF16, dev);
  if (gamma != nullptr) {
    head_rmsnorm(slot, *gamma, heads, head_dim, t);
  } else {
    RowView dst = RowView::of(t.reshape({T, slot.cols}));
    copy_rows(slot, dst);
  }
  if (cos == nullptr) return t;
  Tensor r = Tensor::empty({T, heads, head_dim}, DType::BF16, dev);
  rope_apply(t, *cos, *sin, r);
  return r;
}

// pure_eager's chain: q and k prepared apart, then torch.stack with v into a new [T, 3C].
Tensor qk_rmsnorm_rope_chain(const Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                             const Tensor* k_gamma, const Tensor* cos, const Tensor* sin) {
  const int64_t T = qkv.size(0), C = int64_t{heads} * head_dim;
  const RowView q{qkv, 0, T, C, 3 * C}, k{qkv, C, T, C, 3 * C}, v{qkv, 2 * C, T, C, 3 * C};
  Tensor qn = prepare_head_slot(q, heads, head_dim, q_gamma, cos, sin);
  Tensor kn = prepare_head_slot(k, heads, head_dim, k_gamma, cos, sin);
  Tensor stacked = Tensor::empty({T, 3 * C}, DType::BF16, qkv.device());
  RowView dq = RowView::columns(stacked, 0, C), dk = RowView::columns(stacked, C, C),
          dv = RowView::columns(stacked, 2 * C, C);
  copy_rows(RowView::of(qn.reshape({T, C})), dq);
  copy_rows(RowView::of(kn.reshape({T, C})), dk);
  copy_rows(v, dv);
  return stacked;
}

}  // namespace

namespace reference {

Tensor qk_rmsnorm_rope(const Tensor& qkv, int heads, int head_dim, const Tensor* q_gamma,
                       const Tensor* k_gamma, const Tensor* cos, const Tensor* sin) {
  return qk_rmsnorm_rope_chain(qkv, heads, head_dim, q_gamma, k_gamma, cos, sin);
}

Tensor qk_rmsnorm_cross(const Tensor& q, const Tensor& gamma, int heads, int head_dim) {
  // pure_eager: head_rmsnorm into a new [T, H, D], read as [T, C].
  const int64_t C = int64_t{heads} * head_dim;
  Tensor qn = Tensor::empty({q.size(0), heads, head_dim}, DType::BF16, q.device());
  head_rmsnorm(RowView::of(q), gamma, heads, head_dim, qn);
  return qn.reshape({q.size(0), C});
}

}  // namespace reference
}  // namespace s3d::kernels
