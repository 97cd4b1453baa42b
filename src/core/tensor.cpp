#include "core/tensor.h"

#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <sstream>

#include "core/allocator.h"
#include "core/bf16.h"
#include "core/context.h"
#include "core/cuda_util.h"
#include "core/error.h"

namespace s3d {

class Storage {
 public:
  Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
    // Zero-byte tensors still get a distinct, valid pointer.
    size_t n = bytes == 0 ? 1 : bytes;
    if (device == Device::CUDA) {
      allocator_ = current_context().allocator_handle();
      ptr_ = allocator_->allocate(n);
    } else {
      ptr_ = host_allocate(n);
    }
  }
  // Borrowed memory (a caller-owned buffer): never freed here.
  Storage(void* ptr, size_t bytes, Device device)
      : ptr_(ptr), bytes_(bytes), device_(device), borrowed_(true) {}
  ~Storage() {
    if (borrowed_) return;
    if (device_ == Device::CUDA) {
      allocator_->release(ptr_, bytes_ == 0 ? 1 : bytes_);
    } else {
      host_release(ptr_, bytes_ == 0 ? 1 : bytes_);
    }
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
  Device device_;
  bool borrowed_ = false;
  // The allocator a device block returns to (it outlives the context that made it).
  std::shared_ptr<DeviceAllocator> allocator_;
};

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::BF16: return 2;
    case DType::F32: return 4;
    case DType::I32: return 4;
  }
  fail("unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::I32: return "i32";
  }
  return "?";
}

const char* device_name(Device device) { return device == Device::CUDA ? "cuda" : "cpu"; }

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    S3D_CHECK(d >= 0, "shape ", shape_str(shape), " has a negative dimension");
    S3D_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", shape_str(shape),
              " has more elements than fit in 64 bits");
    n *= d;
  }
  return n;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  S3D_CHECK(data != nullptr, "a borrowed tensor ", shape_str(shape), " has a null pointer");
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  S3D_CHECK(static_cast<uint64_t>(t.numel_) <= std::numeric_limits<size_t>::max() / 4,
            "tensor ", shape_str(shape), " is too large to allocate");
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device == Device::CUDA) {
    S3D_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), current_stream()));
  } else {
    std::memset(t.data(), 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype, Device::CPU);
  S3D_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_floats: ", values.size(),
            " values for shape ", shape_str(shape));
  switch (dtype) {
    case DType::F32:
      std::memcpy(t.data(), values.data(), t.nbytes());
      break;
    case DType::BF16: {
      auto* p = t.data_as<uint16_t>();
      for (size_t i = 0; i < values.size(); ++i) p[i] = float_to_bf16(values[i]);
      break;
    }
    case DType::I32: {
      auto* p = t.data_as<int32_t>();
      for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<int32_t>(values[i]);
      break;
    }
  }
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape) {
  Tensor t = empty(shape, DType::I32, Device::CPU);
  S3D_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_ints: ", values.size(),
            " values for shape ", shape_str(shape));
  std::memcpy(t.data(), values.data(), t.nbytes());
  return t;
}

int64_t Tensor::size(int dim) const {
  int n = ndim();
  int d = dim < 0 ? dim + n : dim;
  S3D_CHECK(d >= 0 && d < n, "dimension ", dim, " out of range for ", describe());
  return shape_[d];
}

void* Tensor::data() {
  S3D_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->ptr()) + offset_bytes_;
}

const void* Tensor::data() const {
  S3D_CHECK(defined(), "access to an undefined tensor");
  return static_cast<const char*>(storage_->ptr()) + offset_bytes_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  S3D_CHECK(shape_numel(shape) == numel_, "cannot reshape ", describe(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  S3D_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "rows [", begin, ", ",
            end, ") out of range for ", describe());
  Tensor t = *this;
  int64_t row_elems = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  t.offset_bytes_ += static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row_elems;
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  S3D_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy of ", src.describe(), " into ",
            describe(), ": shapes or dtypes differ");
  if (nbytes() == 0) return;
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    std::memcpy(data(), src.data(), nbytes());
    return;
  }
  cudaMemcpyKind kind = device_ == Device::CUDA
                            ? (src.device_ == Device::CUDA ? cudaMemcpyDeviceToDevice
                                                           : cudaMemcpyHostToDevice)
                            : cudaMemcpyDeviceToHost;
  S3D_CUDA_CHECK(cudaMemcpyAsync(data(), src.data(), nbytes(), kind, current_stream()));
  S3D_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

int64_t Tensor::first_non_finite() const {
  S3D_CHECK(device() == Device::CPU, "first_non_finite: the tensor must be on the host, got ",
            describe());
  const int64_t n = numel();
  if (dtype() == DType::BF16) {
    const auto* p = static_cast<const uint16_t*>(data());
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & 0x7f80u) == 0x7f80u) return i;
  } else if (dtype() == DType::F32) {
    const auto* p = static_cast<const uint32_t*>(data());
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & 0x7f800000u) == 0x7f800000u) return i;
  }
  return -1;
}

std::vector<float> Tensor::to_floats() const {
  Tensor host = device_ == Device::CPU ? *this : to(Device::CPU);
  std::vector<float> out(static_cast<size_t>(numel_));
  switch (dtype_) {
    case DType::F32:
      std::memcpy(out.data(), host.data(), nbytes());
      break;
    case DType::BF16: {
      const auto* p = host.data_as<uint16_t>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::I32: {
      const auto* p = host.data_as<int32_t>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p[i]);
      break;
    }
  }
  return out;
}

void Tensor::poison() {
  if (nbytes() == 0) return;
  if (device_ == Device::CUDA) {
    S3D_CUDA_CHECK(cudaMemsetAsync(data(), 0xFF, nbytes(), current_stream()));
    S3D_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  } else {
    std::memset(data(), 0xFF, nbytes());
  }
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return cat(dtype_name(dtype_), shape_str(shape_), " on ", device_name(device_));
}

void check_tensor(const Tensor& t, const char* what, DType dtype, const Shape& shape) {
  S3D_CHECK(t.defined(), what, ": tensor is missing");
  bool ok = t.dtype() == dtype && t.ndim() == static_cast<int>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || shape[i] == t.shape()[i];
  if (!ok) {
    Shape shown = shape;
    fail(what, ": expected ", dtype_name(dtype), shape_str(shown), " (-1 = any), got ",
         t.describe());
  }
}

void check_same_device(const Tensor& a, const Tensor& b, const char* what) {
  S3D_CHECK(a.device() == b.device(), what, ": operands on different devices (", a.describe(),
            " and ", b.describe(), ")");
}

}  // namespace s3d

namespace s3d {

RowView RowView::of(const Tensor& t) {
  S3D_CHECK(t.ndim() >= 1, "RowView::of needs at least one dimension, got ", t.describe());
  int64_t rows = t.size(0);
  int64_t cols = rows == 0 ? 0 : t.numel() / rows;
  return RowView{t, 0, rows, cols, cols};
}

RowView RowView::columns(const Tensor& t, int64_t col_begin, int64_t cols) {
  RowView v = of(t);
  S3D_CHECK(col_begin >= 0 && cols >= 0 && col_begin + cols <= v.cols, "columns [", col_begin,
            ", ", col_begin + cols, ") out of range for ", t.describe());
  v.offset = col_begin;
  v.cols = cols;
  return v;
}

const void* RowView::data() const {
  return static_cast<const char*>(base.data()) + offset * static_cast<int64_t>(dtype_size(dtype()));
}

void* RowView::mutable_data() {
  return static_cast<char*>(base.data()) + offset * static_cast<int64_t>(dtype_size(dtype()));
}

void RowView::check_bounds(const char* what) const {
  S3D_CHECK(offset >= 0 && rows >= 0 && cols >= 0 && stride >= cols, what,
            ": malformed row view (offset ", offset, ", rows ", rows, ", cols ", cols,
            ", stride ", stride, ")");
  if (rows == 0 || cols == 0) return;
  int64_t last = offset + (rows - 1) * stride + cols;
  S3D_CHECK(last <= base.numel(), what, ": row view reaches element ", last, " of ",
            base.describe());
}

}  // namespace s3d
