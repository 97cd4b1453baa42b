// Weight formats of linear layers (docs/DESIGN.md, "Weight formats"): how a layer's weights
// are held at run time and applied. A format is one row of weight_formats(): the run-time
// tensors a layer keeps (its layout: each a name suffix, a shape, a dtype and the
// LinearWeights field it binds to), how they are made from the checkpoint's tensors at load
// (create, on the host, once), and how y = x W^T + b is computed from them (apply, through the
// `linear` op and the format's own kernels). Everything else follows from the layout: the
// engine holds the run-time tensors in the checkpoint's tensor map under NAME + suffix, so
// binding, the device upload, the host copy of an offload and the reload, and the byte counts
// are the same code for every format.
//
// plain (the first row) keeps the checkpoint's tensors as they are (bf16 in the blocks, f32
// around them): every path's bits. A second format takes the layers whose run-time dtype it
// names and leaves the others plain; row_scaled (ops/formats/row_scaled.cpp) is the test
// format that shows the seam: bf16 weights scaled per output channel, an fp32 scale folded in
// by an epilogue kernel, as an FP8 format with per-channel scales would be.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "ops/op.h"

namespace s3d::ops {

struct WeightFormat;

// A linear layer's run-time weights in its format. An undefined layer (a weight the config
// does not have) has no format and no tensors.
struct LinearWeights {
  const WeightFormat* format = nullptr;
  Tensor weight;  // [out, in], the format's dtype
  Tensor bias;    // [out] or undefined
  Tensor scale;   // f32 [out], for the formats that keep a per-channel scale
  const Tensor* bias_or_null() const { return bias.defined() ? &bias : nullptr; }
  int64_t out_features() const { return weight.size(0); }
};

// One run-time tensor of a layer: NAME + suffix in the tensor map, bound to `field`.
struct FormatTensor {
  std::string suffix;  // ".weight", ".bias", ".weight_scale"
  Shape shape;
  DType dtype;
  Tensor LinearWeights::*field;
};

struct WeightFormat {
  std::string_view name;     // EngineOptions::weight_format, `--weight-format`
  std::string_view summary;  // one line
  Contract contract;         // of a model in this format against the plain one
  double tolerance;          // relative L2 of a layer's output (0: bitwise)
  std::string_view kernel;   // what apply runs besides the `linear` op
  // Whether a layer whose checkpoint weight has run-time dtype `dtype` is held in this format;
  // the others stay plain.
  bool (*takes)(DType dtype);
  // The run-time tensors of a layer [out, in] whose checkpoint weight and bias are `dtype`.
  std::vector<FormatTensor> (*layout)(int64_t out, int64_t in, DType dtype);
  // The run-time tensors, in layout order, from the checkpoint's host tensors.
  std::vector<Tensor> (*create)(const Tensor& weight, const Tensor& bias);
  // y = x W^T + b from the layer's run-time tensors (x, y as the `linear` op takes them).
  void (*apply)(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& y);
};

// Every format, plain first.
const std::vector<WeightFormat>& weight_formats();
const WeightFormat& plain_format();
// The row named `name` ("" is plain); throws naming the known formats.
const WeightFormat& find_weight_format(std::string_view name);
// The format a layer is held in: `format` where it takes the layer's dtype, else plain.
const WeightFormat& format_for(const WeightFormat& format, DType dtype);

// y = x W^T + b for a layer of the model: its format's apply.
void linear(const OpPlan& plan, const Tensor& x, const LinearWeights& w, Tensor& y);

}  // namespace s3d::ops
