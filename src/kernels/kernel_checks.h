// Argument checks shared by the reference-path ops, and the CPU oracle's element access.
// Every message starts with the op and names the operand, the expectation and what was found.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/bf16.h"
#include "core/error.h"
#include "core/tensor.h"

namespace s3d::kernels::detail {

// 16-byte alignment, the condition for the kernels' vector (8 x bf16) access.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline void check_defined(const Tensor& t, const char* op, const char* name) {
  S3D_CHECK(t.defined(), op, ": ", name, " is missing (undefined tensor)");
}

// bf16 or f32.
inline void check_float(const Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  S3D_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F32, op, ": ", name,
            " must be bf16 or f32, got ", t.describe());
}

inline void check_dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  check_defined(t, op, name);
  S3D_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ",
            t.describe());
}

// Exact shape (no wildcards).
inline void check_shape(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  check_defined(t, op, name);
  S3D_CHECK(t.shape() == shape, op, ": ", name, " must have shape ", shape_str(shape), ", got ",
            t.describe());
}

inline void check_same_shape(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                             const char* ref_name) {
  S3D_CHECK(t.shape() == ref.shape(), op, ": ", name, " must have the shape of ", ref_name, " ",
            shape_str(ref.shape()), ", got ", t.describe());
}

// Every operand on the same device; names them when not.
inline void check_same_device(const char* op,
                              std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const auto& [first_name, first] = *ts.begin();
  for (const auto& [name, t] : ts) {
    S3D_CHECK(t->device() == first->device(), op, ": operands on different devices (",
              first_name, " is ", first->describe(), ", ", name, " is ", t->describe(), ")");
  }
}

inline void check_view(const RowView& v, const char* op, const char* name) {
  check_defined(v.base, op, name);
  v.check_bounds(cat(op, ": ", name).c_str());
}

// ---- CPU element access: widen to fp32 on load, round once on store ----

inline float load_f32(const void* p, DType dtype, int64_t i) {
  if (dtype == DType::F32) return static_cast<const float*>(p)[i];
  return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}

inline void store_f32(void* p, DType dtype, int64_t i, float v) {
  if (dtype == DType::F32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
  }
}

// The operands of a modulated LayerNorm (modulated_layernorm.h, fast_norm.h): x bf16 [T, C]; shift and
// scale bf16 views of the same B >= 1 rows of C with one row stride; batch_index i32 [T];
// out bf16 like x; eps >= 0; all on one device.
inline void check_modulated_norm_operands(const char* op, const Tensor& x, const RowView& shift,
                                          const RowView& scale, const Tensor& batch_index,
                                          float eps, const Tensor& out) {
  check_dtype(x, DType::BF16, op, "x");
  S3D_CHECK(x.ndim() == 2 && x.size(1) > 0, op, ": x must be bf16 [T, C], got ", x.describe());
  const int64_t T = x.size(0), C = x.size(1);
  check_view(shift, op, "shift");
  check_view(scale, op, "scale");
  check_dtype(shift.base, DType::BF16, op, "shift");
  check_dtype(scale.base, DType::BF16, op, "scale");
  S3D_CHECK(shift.cols == C && scale.cols == C && shift.rows == scale.rows && shift.rows > 0,
            op, ": shift and scale must be views of the same B >= 1 rows of ", C,
            " elements, got ", shift.rows, " x ", shift.cols, " and ", scale.rows, " x ",
            scale.cols);
  S3D_CHECK(shift.stride == scale.stride, op, ": shift and scale must share a row stride, got ",
            shift.stride, " and ", scale.stride);
  check_dtype(batch_index, DType::I32, op, "batch_index");
  check_shape(batch_index, {T}, op, "batch_index");
  check_dtype(out, DType::BF16, op, "out");
  check_same_shape(out, x, op, "out", "x");
  check_same_device(op, {{"x", &x}, {"shift", &shift.base}, {"scale", &scale.base},
                         {"batch_index", &batch_index}, {"out", &out}});
  S3D_CHECK(eps >= 0.0f, op, ": eps must be >= 0, got ", eps);
}

// The operands of the in-place per-head q/k ops (qk_rmsnorm.h, fast_norm.h): x bf16 [T, >=
// slots * H * D], D even; gammas f32 [H, D] (either may be null); cos and sin f32 [T, D / 2],
// both or neither; at least a gamma or the RoPE tables; all on x's device.
inline void check_qk_operands(const char* op, const Tensor& x, int slots, int heads,
                              int head_dim, const Tensor* gamma0, const Tensor* gamma1,
                              const Tensor* cos, const Tensor* sin) {
  check_dtype(x, DType::BF16, op, "x");
  S3D_CHECK(heads > 0 && head_dim > 0 && head_dim % 2 == 0, op,
            ": heads and head_dim must be positive, head_dim even, got ", heads, " x ", head_dim);
  const int64_t C = int64_t{heads} * head_dim;
  S3D_CHECK(x.ndim() == 2 && x.size(1) >= slots * C, op, ": x must be bf16 [T, >= ", slots,
            " * ", C, "], got ", x.describe());
  const int64_t T = x.size(0);
  for (const Tensor* g : {gamma0, gamma1}) {
    if (g == nullptr) continue;
    check_dtype(*g, DType::F32, op, "gamma");
    check_shape(*g, {heads, head_dim}, op, "gamma");
    check_same_device(op, {{"x", &x}, {"gamma", g}});
  }
  S3D_CHECK((cos == nullptr) == (sin == nullptr), op, ": give both cos and sin or neither");
  if (cos != nullptr) {
    check_dtype(*cos, DType::F32, op, "cos");
    check_shape(*cos, {T, head_dim / 2}, op, "cos");
    check_dtype(*sin, DType::F32, op, "sin");
    check_shape(*sin, {T, head_dim / 2}, op, "sin");
    check_same_device(op, {{"x", &x}, {"cos", cos}, {"sin", sin}});
  }
  S3D_CHECK(gamma0 != nullptr || cos != nullptr, op, ": nothing to do (no gamma, no RoPE)");
}

// The packed QKV [T, 3 * H * D] of the self-attention's in-place q/k ops: both gammas or
// neither.
inline void check_packed_qkv(const char* op, const Tensor& qkv, int heads, int head_dim,
                             const Tensor* q_gamma, const Tensor* k_gamma) {
  S3D_CHECK((q_gamma == nullptr) == (k_gamma == nullptr), op,
            ": give both q and k gammas or neither");
  check_defined(qkv, op, "qkv");
  S3D_CHECK(qkv.ndim() == 2 && qkv.size(1) == 3 * int64_t{heads} * head_dim, op,
            ": qkv must be bf16 [T, 3 * ", heads, " * ", head_dim, "], got ", qkv.describe());
}

// The cross-attention's q [T, H * D] of the in-place head RMSNorm.
inline void check_heads_row(const char* op, const Tensor& x, int heads, int head_dim) {
  check_defined(x, op, "x");
  S3D_CHECK(x.ndim() == 2 && x.size(1) == int64_t{heads} * head_dim, op, ": x must be bf16 [T, ",
            heads, " * ", head_dim, "], got ", x.describe());
}

// The raw operands the in-place q/k kernels take (null where absent).
struct QkPointers {
  const float* gammas[2] = {nullptr, nullptr};
  const float* cos = nullptr;
  const float* sin = nullptr;
};
inline QkPointers qk_pointers(const Tensor* gamma0, const Tensor* gamma1, const Tensor* cos,
                              const Tensor* sin) {
  QkPointers p;
  p.gammas[0] = gamma0 ? gamma0->data_as<float>() : nullptr;
  p.gammas[1] = gamma1 ? gamma1->data_as<float>() : nullptr;
  p.cos = cos ? cos->data_as<float>() : nullptr;
  p.sin = sin ? sin->data_as<float>() : nullptr;
  return p;
}

// The end of every candidate kernel's entry point, after its operand checks: its support
// rule's verdict `why` (a refused shape throws: the op's ladder asks the rule first and
// counts a fallback instead), nothing to do for no rows, then the version of x's device.
template <class Cpu, class Cuda>
void run_supported(const char* op, const std::string& why, const Tensor& x, const Cpu& cpu,
                   const Cuda& cuda) {
  S3D_CHECK(why.empty(), op, ": unsupported shape: ", why, " (x ", x.describe(),
            "); the op (ops/) runs its next candidate instead");
  if (x.size(0) == 0) return;
  if (x.is_cuda()) {
    cuda();
  } else {
    cpu();
  }
}

}  // namespace s3d::kernels::detail
