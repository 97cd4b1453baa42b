// The weight formats' table and the plain format (the checkpoint's tensors as they are).
#include "ops/weight_format.h"

#include "core/error.h"
#include "ops/linear.h"

namespace s3d::ops {

// Each further format's row, defined in src/ops/formats/NAME.cpp.
WeightFormat row_scaled_format();

namespace {

std::vector<FormatTensor> plain_layout(int64_t out, int64_t in, DType dtype) {
  return {{".weight", {out, in}, dtype, &LinearWeights::weight},
          {".bias", {out}, dtype, &LinearWeights::bias}};
}

WeightFormat plain() {
  return WeightFormat{
      "plain",
      "the checkpoint's tensors as they are: bf16 in the blocks, f32 around them",
      Contract::Bitwise,
      0,
      "",
      [](DType) { return true; },
      &plain_layout,
      [](const Tensor& weight, const Tensor& bias) { return std::vector<Tensor>{weight, bias}; },
      [](const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& y) {
        linear(plan, x, w.weight, w.bias_or_null(), y);
      }};
}

std::vector<WeightFormat> make_formats() {
  std::vector<WeightFormat> t{plain(), row_scaled_format()};
  for (const WeightFormat& f : t)
    S3D_CHECK(f.takes && f.layout && f.create && f.apply, "weight formats: ", f.name,
              " lacks a function");
  return t;
}

}  // namespace

const std::vector<WeightFormat>& weight_formats() {
  static const std::vector<WeightFormat> formats = make_formats();
  return formats;
}

const WeightFormat& plain_format() { return weight_formats().front(); }

const WeightFormat& find_weight_format(std::string_view name) {
  if (name.empty()) return plain_format();
  std::string known;
  for (const WeightFormat& f : weight_formats()) {
    if (f.name == name) return f;
    known += cat(known.empty() ? "" : ", ", f.name);
  }
  fail("unknown weight format '", name, "' (known: ", known, ")");
}

const WeightFormat& format_for(const WeightFormat& format, DType dtype) {
  return format.takes(dtype) ? format : plain_format();
}

void linear(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& y) {
  S3D_CHECK(w.format != nullptr, "linear: the layer's weights are not bound (no format)");
  w.format->apply(plan, x, w, y);
}

}  // namespace s3d::ops
