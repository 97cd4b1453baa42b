// Elementwise ops: argument checks, device dispatch, and the CPU oracle (namespace cpu).
#include "kernels/elementwise.h"

#include <cstring>

#include "kernels/elementwise_cuda.h"
#include "kernels/kernel_checks.h"
#include "kernels/reference_math.h"

namespace s3d::kernels {
namespace cpu {
namespace {

using detail::load_f32;
using detail::store_f32;

template <class F>
void map_unary(const Tensor& x, Tensor& out, F f) {
  const void* xp = x.data();
  void* op = out.data();
  const DType xd = x.dtype(), od = out.dtype();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) store_f32(op, od, i, f(load_f32(xp, xd, i)));
}

// b_period == 0: elementwise; otherwise b[i % b_period] (one row broadcast over a's rows).
template <class F>
void map_binary(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out, F f) {
  const void* ap = a.data();
  const void* bp = b.data();
  void* op = out.data();
  const DType ad = a.dtype(), bd = b.dtype(), od = out.dtype();
  const int64_t n = a.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = b_period == 0 ? i : i % b_period;
    store_f32(op, od, i, f(load_f32(ap, ad, i), load_f32(bp, bd, j)));
  }
}

// Copies `cols` elements per row; src row of dst row r is row_of(r). Raw bytes, no rounding.
template <class RowOf>
void copy_rows_bytes(const RowView& src, void* dst, int64_t dst_stride, int64_t rows,
                     RowOf row_of) {
  const size_t es = dtype_size(src.dtype());
  const auto* s = static_cast<const char*>(src.data());
  auto* d = static_cast<char*>(dst);
  const size_t row_bytes = static_cast<size_t>(src.cols) * es;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + static_cast<size_t>(r * dst_stride) * es,
                s + static_cast<size_t>(row_of(r) * src.stride) * es, row_bytes);
  }
}

}  // namespace

void cast(const Tensor& x, Tensor& out) {
  map_unary(x, out, [](float v) { return v; });
}

void add(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out) {
  map_binary(a, b, b_period, out, [](float x, float y) { return x + y; });
}

void mul(const Tensor& a, const Tensor& b, int64_t b_period, Tensor& out) {
  map_binary(a, b, b_period, out, [](float x, float y) { return x * y; });
}

void add_scalar(const RowView& x, float s, Tensor& out) {
  const void* xp = x.data();
  void* op = out.data();
  const DType xd = x.dtype(), od = out.dtype();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c) {
      store_f32(op, od, r * x.cols + c, load_f32(xp, xd, r * x.stride + c) + s);
    }
  }
}

void gather_rows(const RowView& src, const Tensor& index, Tensor& out) {
  const int32_t* idx = index.data_as<int32_t>();
  const int64_t rows = index.numel();
  // Checked before any write so that a bad index leaves `out` untouched.
  for (int64_t t = 0; t < rows; ++t) {
    S3D_CHECK(idx[t] >= 0 && idx[t] < src.rows, "gather_rows: index[", t, "] = ", idx[t],
              " is outside [0, ", src.rows, ") (src has ", src.rows, " rows)");
  }
  copy_rows_bytes(src, out.data(), src.cols, rows, [idx](int64_t r) { return int64_t{idx[r]}; });
}

void copy_rows(const RowView& src, RowView& dst) {
  copy_rows_bytes(src, dst.mutable_data(), dst.stride, src.rows, [](int64_t r) { return r; });
}

void broadcast_row(const Tensor& row, Tensor& out) {
  const int64_t cols = row.numel();
  copy_rows_bytes(RowView{row, 0, 1, cols, 0}, out.data(), cols, out.numel() / cols,
                  [](int64_t) { return int64_t{0}; });
}

void silu(const Tensor& x, Tensor& out) { map_unary(x, out, math::silu); }

void gelu_tanh(const Tensor& x, Tensor& out) { map_unary(x, out, math::gelu_tanh); }

}  // namespace cpu

namespace {

using detail::check_float;
using detail::check_same_device;
using detail::check_same_shape;

// Validates a unary float op and returns true when there is work to do.
bool check_unary(const char* op, const Tensor& x, const Tensor& out) {
  check_float(x, op, "x");
  check_float(out, op, "out");
  check_same_device(op, {{"x", &x}, {"out", &out}});
  check_same_shape(out, x, op, "out", "x");
  return x.numel() > 0;
}

// Validates add/mul and returns b's broadcast period (0 when b has a's shape).
int64_t check_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_float(a, op, "a");
  check_float(b, op, "b");
  check_float(out, op, "out");
  check_same_device(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  check_same_shape(out, a, op, "out", "a");
  if (b.shape() == a.shape()) return 0;
  S3D_CHECK(a.ndim() > 0 && b.numel() == a.size(-1), op, ": b must have a's shape ",
            shape_str(a.shape()), " or hold one row of ", a.ndim() > 0 ? a.size(-1) : 1,
            " elements to broadcast, got ", b.describe());
  return a.size(-1);
}

}  // namespace

void cast(const Tensor& x, Tensor& out) {
  if (!check_unary("cast", x, out)) return;
  if (x.is_cuda()) {
    cuda::cast(x, out);
  } else {
    cpu::cast(x, out);
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t period = check_binary("add", a, b, out);
  if (a.numel() == 0) return;
  if (a.is_cuda()) {
    cuda::add(a, b, period, out);
  } else {
    cpu::add(a, b, period, out);
  }
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t period = check_binary("mul", a, b, out);
  if (a.numel() == 0) return;
  if (a.is_cuda()) {
    cuda::mul(a, b, period, out);
  } else {
    cpu::mul(a, b, period, out);
  }
}

void add_scalar(const RowView& x, float s, Tensor& out) {
  const char* op = "add_scalar";
  detail::check_view(x, op, "x");
  check_float(x.base, op, "x");
  check_float(out, op, "out");
  check_same_device(op, {{"x", &x.base}, {"out", &out}});
  detail::check_shape(out, {x.rows, x.cols}, op, "out");
  if (out.numel() == 0) return;
  if (x.base.is_cuda()) {
    cuda::add_scalar(x, s, out);
  } else {
    cpu::add_scalar(x, s, out);
  }
}

void gather_rows(const RowView& src, const Tensor& index, Tensor& out) {
  const char* op = "gather_rows";
  detail::check_view(src, op, "src");
  detail::check_dtype(index, DType::I32, op, "index");
  S3D_CHECK(index.ndim() == 1, op, ": index must be i32 [T], got ", index.describe());
  detail::check_dtype(out, src.dtype(), op, "out");
  detail::check_shape(out, {index.size(0), src.cols}, op, "out");
  check_same_device(op, {{"src", &src.base}, {"index", &index}, {"out", &out}});
  if (out.numel() == 0) return;
  // The GPU kernel traps on an out-of-range index (reading the indices here would need a
  // host synchronisation); the model validates batch indices once per request.
  if (src.base.is_cuda()) {
    cuda::gather_rows(src, index, out);
  } else {
    cpu::gather_rows(src, index, out);
  }
}

void broadcast_row(const Tensor& row, Tensor& out) {
  const char* op = "broadcast_row";
  S3D_CHECK(row.defined() && out.defined() && out.ndim() >= 1, op,
            ": row and out must be defined, out at least 1-D");
  detail::check_dtype(out, row.dtype(), op, "out");
  S3D_CHECK(row.numel() == out.size(-1), op, ": row must hold one row of out's ", out.size(-1),
            " elements, got ", row.describe(), " for out ", out.describe());
  check_same_device(op, {{"row", &row}, {"out", &out}});
  if (out.numel() == 0) return;
  if (row.is_cuda()) {
    cuda::broadcast_row(row, out);
  } else {
    cpu::broadcast_row(row, out);
  }
}

// src and dst must not overlap (not checked: the op is the eager torch.stack copy).
void copy_rows(const RowView& src, RowView& dst) {
  const char* op = "copy_rows";
  detail::check_view(src, op, "src");
  detail::check_view(dst, op, "dst");
  S3D_CHECK(src.dtype() == dst.dtype(), op, ": dst must have src's dtype ",
            dtype_name(src.dtype()), ", got ", dtype_name(dst.dtype()));
  S3D_CHECK(src.rows == dst.rows && src.cols == dst.cols, op, ": dst must be ", src.rows, " x ",
            src.cols, " like src, got ", dst.rows, " x ", dst.cols);
  check_same_device(op, {{"src", &src.base}, {"dst", &dst.base}});
  if (src.rows == 0 || src.cols == 0) return;
  if (src.base.is_cuda()) {
    cuda::copy_rows(src, dst);
  } else {
    cpu::copy_rows(src, dst);
  }
}

void silu(const Tensor& x, Tensor& out) {
  if (!check_unary("silu", x, out)) return;
  if (x.is_cuda()) {
    cuda::silu(x, out);
  } else {
    cpu::silu(x, out);
  }
}

void gelu_tanh(const Tensor& x, Tensor& out) {
  if (!check_unary("gelu_tanh", x, out)) return;
  if (x.is_cuda()) {
    cuda::gelu_tanh(x, out);
  } else {
    cpu::gelu_tanh(x, out);
  }
}

}  // namespace s3d::kernels
