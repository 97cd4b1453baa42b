// Argument checks shared by the reference-path ops, and the CPU oracle's element access.
// Every message starts with the op and names the operand, the expectation and what was found.
#pragma once

#include <cstdint>
#include <initializer_list>
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

}  // namespace s3d::kernels::detail
