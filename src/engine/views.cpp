// TensorView and Array (include/sparse3d/types.h) and their bridge to the engine's tensors.
#include <cuda_runtime.h>

#include "core/cuda_util.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "engine/engine_impl.h"

namespace sparse3d {

int64_t TensorView::numel() const { return s3d::shape_numel(shape); }

size_t TensorView::nbytes() const {
  return static_cast<size_t>(numel()) * s3d::dtype_size(dtype);
}

std::string TensorView::describe() const {
  std::string where = device == Device::CUDA ? s3d::cat("cuda:", device_index) : "cpu";
  return s3d::cat(s3d::dtype_name(dtype), s3d::shape_str(shape), " on ", where);
}

std::vector<float> Array::to_floats() const {
  if (!defined()) return {};
  return borrow(view, "array").to_floats();
}

const char* version() { return SPARSE3D_VERSION; }

Array draw_noise(uint64_t seed, int64_t rows, int64_t cols, uint64_t offset) {
  S3D_CHECK(rows >= 0 && cols >= 0, "draw_noise: shape [", rows, ", ", cols,
            "] has a negative dimension");
  // At most the elements of an int32-indexed layout (8 GiB of f32), and no more than the
  // host has available; the range read of the seed's stream ends by element 2^63 (the stream
  // is read in pairs counted as int64). Each is refused at once, before any allocation.
  constexpr int64_t kMaxNoiseElements = INT32_MAX;
  constexpr uint64_t kNoiseStreamEnd = uint64_t(1) << 63;
  S3D_CHECK(cols == 0 || rows <= kMaxNoiseElements / cols, "draw_noise: rows x cols (", rows,
            " x ", cols, ") is more than ", kMaxNoiseElements,
            " elements (the most it draws at once)");
  const uint64_t n = static_cast<uint64_t>(rows * cols);
  S3D_CHECK(offset <= kNoiseStreamEnd && n <= kNoiseStreamEnd - offset, "draw_noise: offset ",
            offset, " + ", n, " elements (rows x cols) ends past element 2^63 of the seed's stream");
  if (const auto available = s3d::host_memory_available()) {
    const uint64_t bytes = n * sizeof(float);
    S3D_CHECK(bytes <= *available, "draw_noise: rows x cols (", rows, " x ", cols, ") needs ",
              double(bytes) / double(1 << 30), " GiB of host memory, but only ",
              double(*available) / double(1 << 30), " GiB are available");
  }
  s3d::Tensor t = s3d::Tensor::empty({rows, cols}, DType::F32, Device::CPU);
  s3d::normal_fill(seed, offset, static_cast<uint64_t>(t.numel()), t.data_as<float>());
  return array_of(t);
}

std::vector<double> timesteps(const SamplerSettings& settings) {
  // The settings a request would refuse are refused here too (steps within its cap, before
  // the schedule's steps + 1 values are allocated).
  settings.validate();
  return s3d::sampler::timesteps(settings.steps, settings.rescale_t);
}

s3d::Tensor borrow(const TensorView& v, const char* what) {
  S3D_CHECK(v.data != nullptr, what, ": no data (a null pointer)");
  S3D_CHECK(v.dtype == DType::BF16 || v.dtype == DType::F32 || v.dtype == DType::I32, what,
            ": unknown dtype code ", static_cast<int>(v.dtype));
  for (int64_t d : v.shape) S3D_CHECK(d >= 0, what, ": shape ", s3d::shape_str(v.shape),
                                      " has a negative dimension");
  if (v.device == Device::CUDA) {
    int current = 0;
    S3D_CUDA_CHECK(cudaGetDevice(&current));
    S3D_CHECK(v.device_index == current, what, " is on cuda:", v.device_index,
              ", but the engine runs on cuda:", current);
  }
  return s3d::Tensor::borrow(v.data, v.shape, v.dtype, v.device);
}

Array array_of(const s3d::Tensor& t) {
  Array a;
  a.view.data = const_cast<void*>(t.data());
  a.view.dtype = t.dtype();
  a.view.device = t.device();
  a.view.shape = t.shape();
  if (t.device() == Device::CUDA) S3D_CUDA_CHECK(cudaGetDevice(&a.view.device_index));
  a.owner = t.keepalive();
  return a;
}

void copy_into_view(const s3d::Tensor& src, const TensorView& out, const char* what) {
  s3d::Tensor dst = borrow(out, what);
  S3D_CHECK(dst.dtype() == src.dtype() && dst.shape() == src.shape(), what, " must be ",
            s3d::dtype_name(src.dtype()), s3d::shape_str(src.shape()), ", got ", out.describe());
  dst.copy_from(src);
}

}  // namespace sparse3d
