// Gated residual add: the reference chain, the fused
// kernel's support rule, argument checks and device dispatch, and its CPU version.
#include "kernels/gated_residual_add.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/gated_residual_add_cuda.h"
#include "kernels/kernel_checks.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace {

using detail::aligned16;

}  // namespace

namespace cpu {

void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1);
  const uint16_t* xp = x.data_as<uint16_t>();
  const uint16_t* hp = h.data_as<uint16_t>();
  const auto* gp = static_cast<const uint16_t*>(gate.data());
  const int32_t* bidx = batch_index.data_as<int32_t>();
  uint16_t* op = out.data_as<uint16_t>();
  for (int64_t t = 0; t < T; ++t) {
    S3D_CHECK(bidx[t] >= 0 && bidx[t] < gate.rows, "gated_residual_add: batch_index[", t,
              "] = ", bidx[t], " is outside [0, ", gate.rows, ")");
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* g = gp + bidx[t] * gate.stride;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = t * C + c;
      op[i] = float_to_bf16(math::gated_residual_chain(bf16_to_float(xp[i]), bf16_to_float(hp[i]),
                                                       bf16_to_float(g[c])));
    }
  }
}

}  // namespace cpu

namespace fused {

std::string gated_residual_add_unsupported(const Tensor& x, const Tensor& h, const RowView& gate,
                                           const Tensor& out) {
  if (x.dtype() != DType::BF16) return cat("x is ", x.describe(), ", not bf16");
  if (h.dtype() != DType::BF16 || out.dtype() != DType::BF16 || gate.dtype() != DType::BF16)
    return "h, gate and out must be bf16";
  const int64_t C = x.ndim() == 2 ? x.size(1) : 0;
  if (C % 8 != 0) return cat("C = ", C, " is not a multiple of 8 (16-byte chunks)");
  if (gate.stride % 8 != 0) return cat("gate row stride ", gate.stride, " is not a multiple of 8");
  if (!aligned16(x.data()) || !aligned16(h.data()) || !aligned16(out.data()) ||
      !aligned16(gate.data()))
    return "rows are not 16-byte aligned";
  return "";
}

void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out) {
  const char* op = "gated_residual_add";
  detail::check_dtype(x, DType::BF16, op, "x");
  S3D_CHECK(x.ndim() == 2 && x.size(1) > 0, op, ": x must be bf16 [T, C], got ", x.describe());
  const int64_t T = x.size(0), C = x.size(1);
  detail::check_dtype(h, DType::BF16, op, "h");
  detail::check_same_shape(h, x, op, "h", "x");
  detail::check_view(gate, op, "gate");
  detail::check_dtype(gate.base, DType::BF16, op, "gate");
  S3D_CHECK(gate.cols == C && gate.rows > 0, op, ": gate must be a view of B >= 1 rows of ", C,
            " elements, got ", gate.rows, " x ", gate.cols);
  detail::check_dtype(batch_index, DType::I32, op, "batch_index");
  detail::check_shape(batch_index, {T}, op, "batch_index");
  detail::check_dtype(out, DType::BF16, op, "out");
  detail::check_same_shape(out, x, op, "out", "x");
  detail::check_same_device(op, {{"x", &x}, {"h", &h}, {"gate", &gate.base},
                                 {"batch_index", &batch_index}, {"out", &out}});
  detail::run_supported(
      op, gated_residual_add_unsupported(x, h, gate, out), x,
      [&] { cpu::gated_residual_add(x, h, gate, batch_index, out); },
      [&] { cuda::gated_residual_add(x, h, gate, batch_index, out); });
}

}  // namespace fused

namespace reference {

// pure_eager's chain: the gate gathered per token, then mul and add, each rounded to bf16.
void gated_residual_add(const Tensor& x, const Tensor& h, const RowView& gate,
                        const Tensor& batch_index, Tensor& out) {
  Tensor g = Tensor::empty(x.shape(), DType::BF16, x.device());
  gather_rows(gate, batch_index, g);
  Tensor gh = Tensor::empty(x.shape(), DType::BF16, x.device());
  mul(h, g, gh);
  add(x, gh, out);
}

}  // namespace reference
}  // namespace s3d::kernels
