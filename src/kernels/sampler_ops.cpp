// Sampler ops: argument checks, device dispatch, and the CPU oracle (namespace cpu).
#include "kernels/sampler_ops.h"

#include "kernels/kernel_checks.h"
#include "kernels/reference_math.h"
#include "kernels/sampler_ops_cuda.h"

namespace s3d::kernels {
namespace cpu {
namespace {

template <class F>
void map2(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const float* ap = a.data_as<float>();
  const float* bp = b.data_as<float>();
  float* o = out.data_as<float>();
  const int64_t n = a.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = f(ap[i], bp[i]);
}

}  // namespace

void cfg_combine(const Tensor& v_cond, const Tensor& v_uncond, float g, float one_minus_g,
                 Tensor& out) {
  map2(v_cond, v_uncond, out,
       [=](float c, float u) { return math::cfg_combine(c, u, g, one_minus_g); });
}

void euler_step(const Tensor& x, const Tensor& v, float dt, Tensor& out) {
  map2(x, v, out, [=](float xi, float vi) { return math::euler_step(xi, vi, dt); });
}

void axpby_sub(const Tensor& x, float a, const Tensor& v, float b, Tensor& out) {
  map2(x, v, out, [=](float xi, float vi) { return math::axpby_sub(xi, a, vi, b); });
}

void xstart_to_pred(const Tensor& x, float a, const Tensor& x0, float b, Tensor& out) {
  map2(x, x0, out, [=](float xi, float x0i) { return math::xstart_to_pred(xi, a, x0i, b); });
}

// Offsets were checked by the caller (asset_std below).
void asset_std(const Tensor& x, const Tensor& offsets, Tensor& out, bool unbiased) {
  const int64_t C = x.size(1), B = out.numel();
  const float* xp = x.data_as<float>();
  const int32_t* off = offsets.data_as<int32_t>();
  float* o = out.data_as<float>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t begin = off[b] * C, end = off[b + 1] * C;
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += xp[i];
    const double mean = sum / static_cast<double>(end - begin);
    double sum_sq = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double d = xp[i] - mean;
      sum_sq += d * d;
    }
    o[b] = math::std_from_squares(sum_sq, end - begin - (unbiased ? 1 : 0));
  }
}

void guidance_rescale(const Tensor& x0_cfg, const Tensor& std_pos, const Tensor& std_cfg,
                      const Tensor& batch_index, float rho, float one_minus_rho, Tensor& out) {
  const int64_t T = x0_cfg.size(0), C = x0_cfg.size(1);
  const float* xp = x0_cfg.data_as<float>();
  const float* sp = std_pos.data_as<float>();
  const float* sc = std_cfg.data_as<float>();
  const int32_t* bi = batch_index.data_as<int32_t>();
  float* o = out.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float ratio = sp[bi[t]] / sc[bi[t]];
    for (int64_t c = 0; c < C; ++c) {
      o[t * C + c] = math::guidance_rescale(xp[t * C + c], ratio, rho, one_minus_rho);
    }
  }
}

}  // namespace cpu

namespace {

// Two f32 operands of one shape and an f32 output of the same shape, all on one device.
bool check_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                const char* b_name, const Tensor& out) {
  detail::check_dtype(a, DType::F32, op, a_name);
  detail::check_dtype(b, DType::F32, op, b_name);
  detail::check_dtype(out, DType::F32, op, "out");
  detail::check_same_shape(b, a, op, b_name, a_name);
  detail::check_same_shape(out, a, op, "out", a_name);
  detail::check_same_device(op, {{a_name, &a}, {b_name, &b}, {"out", &out}});
  return a.numel() > 0;
}

}  // namespace

void cfg_combine(const Tensor& v_cond, const Tensor& v_uncond, float g, float one_minus_g,
                 Tensor& out) {
  if (!check_pair("cfg_combine", v_cond, "v_cond", v_uncond, "v_uncond", out)) return;
  if (out.is_cuda()) {
    cuda::cfg_combine(v_cond, v_uncond, g, one_minus_g, out);
  } else {
    cpu::cfg_combine(v_cond, v_uncond, g, one_minus_g, out);
  }
}

void euler_step(const Tensor& x, const Tensor& v, float dt, Tensor& out) {
  if (!check_pair("euler_step", x, "x", v, "v", out)) return;
  if (out.is_cuda()) {
    cuda::euler_step(x, v, dt, out);
  } else {
    cpu::euler_step(x, v, dt, out);
  }
}

void axpby_sub(const Tensor& x, float a, const Tensor& v, float b, Tensor& out) {
  if (!check_pair("axpby_sub", x, "x", v, "v", out)) return;
  if (out.is_cuda()) {
    cuda::axpby_sub(x, a, v, b, out);
  } else {
    cpu::axpby_sub(x, a, v, b, out);
  }
}

void xstart_to_pred(const Tensor& x, float a, const Tensor& x0, float b, Tensor& out) {
  if (!check_pair("xstart_to_pred", x, "x", x0, "x0", out)) return;
  if (out.is_cuda()) {
    cuda::xstart_to_pred(x, a, x0, b, out);
  } else {
    cpu::xstart_to_pred(x, a, x0, b, out);
  }
}

void asset_std(const Tensor& x, const Tensor& offsets, Tensor& out, bool unbiased) {
  const char* op = "asset_std";
  detail::check_dtype(x, DType::F32, op, "x");
  S3D_CHECK(x.ndim() == 2, op, ": x must be f32 [T, C], got ", x.describe());
  detail::check_dtype(offsets, DType::I32, op, "offsets");
  S3D_CHECK(offsets.ndim() == 1 && offsets.size(0) >= 1, op,
            ": offsets must be i32 [B + 1], got ", offsets.describe());
  const int64_t B = offsets.size(0) - 1;
  detail::check_dtype(out, DType::F32, op, "out");
  detail::check_shape(out, {B}, op, "out");
  detail::check_same_device(op, {{"x", &x}, {"offsets", &offsets}, {"out", &out}});
  if (B == 0) return;
  if (x.is_cuda()) {
    // The kernel traps on offsets outside [0, T] or decreasing (reading them here would need
    // a host synchronisation); they are derived once per request and checked there.
    cuda::asset_std(x, offsets, out, unbiased);
    return;
  }
  const int32_t* off = offsets.data_as<int32_t>();
  for (int64_t b = 0; b <= B; ++b) {
    S3D_CHECK(off[b] >= 0 && off[b] <= x.size(0) && (b == 0 || off[b] >= off[b - 1]), op,
              ": offsets[", b, "] = ", off[b], " must lie in [", b == 0 ? 0 : off[b - 1], ", ",
              x.size(0), "] (x has ", x.size(0), " rows)");
  }
  cpu::asset_std(x, offsets, out, unbiased);
}

void guidance_rescale(const Tensor& x0_cfg, const Tensor& std_pos, const Tensor& std_cfg,
                      const Tensor& batch_index, float rho, float one_minus_rho, Tensor& out) {
  const char* op = "guidance_rescale";
  detail::check_dtype(x0_cfg, DType::F32, op, "x0_cfg");
  S3D_CHECK(x0_cfg.ndim() == 2, op, ": x0_cfg must be f32 [T, C], got ", x0_cfg.describe());
  const int64_t T = x0_cfg.size(0);
  detail::check_dtype(std_pos, DType::F32, op, "std_pos");
  S3D_CHECK(std_pos.ndim() == 1, op, ": std_pos must be f32 [B], got ", std_pos.describe());
  const int64_t B = std_pos.size(0);
  detail::check_dtype(std_cfg, DType::F32, op, "std_cfg");
  detail::check_shape(std_cfg, {B}, op, "std_cfg");
  detail::check_dtype(batch_index, DType::I32, op, "batch_index");
  detail::check_shape(batch_index, {T}, op, "batch_index");
  detail::check_dtype(out, DType::F32, op, "out");
  detail::check_same_shape(out, x0_cfg, op, "out", "x0_cfg");
  detail::check_same_device(op, {{"x0_cfg", &x0_cfg},
                                 {"std_pos", &std_pos},
                                 {"std_cfg", &std_cfg},
                                 {"batch_index", &batch_index},
                                 {"out", &out}});
  if (x0_cfg.numel() == 0) return;
  if (out.is_cuda()) {
    // The kernel traps on a batch index outside [0, B) (see gather_rows).
    cuda::guidance_rescale(x0_cfg, std_pos, std_cfg, batch_index, rho, one_minus_rho, out);
    return;
  }
  const int32_t* bi = batch_index.data_as<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    S3D_CHECK(bi[t] >= 0 && bi[t] < B, op, ": batch_index[", t, "] = ", bi[t],
              " is outside [0, ", B, ")");
  }
  cpu::guidance_rescale(x0_cfg, std_pos, std_cfg, batch_index, rho, one_minus_rho, out);
}

}  // namespace s3d::kernels
