// Dense tensors on the host or the GPU: bf16, fp32 or int32, contiguous, row-major.
// A Tensor shares its storage (copying a Tensor copies a handle, not the data); `rows`
// and `reshape` are views into the same storage. Device storage comes from the caching
// allocator (allocator.h), host storage from 64-byte aligned malloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparse3d/types.h"

namespace s3d {

using ::sparse3d::DType;
using ::sparse3d::Device;

using Shape = std::vector<int64_t>;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);   // "bf16", "f32", "i32"
const char* device_name(Device device);  // "cpu", "cuda"
std::string shape_str(const Shape& shape);  // "[3664, 1536]"
int64_t shape_numel(const Shape& shape);    // throws on negative dims or overflow

class Storage;

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor. Device tensors are allocated on the current stream's device.
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  static Tensor zeros(const Shape& shape, DType dtype, Device device);
  // Host tensors from values; bf16 tensors round each float to nearest even.
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);
  // A view of caller-owned memory (contiguous, row-major): nothing is copied or freed; the
  // caller keeps `data` valid while the tensor or any view of it is used.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cuda() const { return device_ == Device::CUDA; }

  void* data();
  const void* data() const;
  template <class T>
  T* data_as() { return static_cast<T*>(data()); }
  template <class T>
  const T* data_as() const { return static_cast<const T*>(data()); }

  // Same storage, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of the first dimension; shares storage.
  Tensor rows(int64_t begin, int64_t end) const;

  // Copies into a new tensor on `device` (synchronous with respect to the host).
  Tensor to(Device device) const;
  // Copies `src` (same shape and dtype, any device) into this tensor, synchronously.
  void copy_from(const Tensor& src);
  // Host copy of the values as floats (bf16 and i32 are converted); for tests and output.
  std::vector<float> to_floats() const;
  // The index of the first NaN or infinity (bf16 or f32, on the host), or -1; checked on the
  // stored bits (all exponent bits set), without converting the tensor.
  int64_t first_non_finite() const;
  // Fills every byte with 0xFF (a NaN in bf16 and fp32, -1 in int32) so that a test
  // notices any element a kernel did not write.
  void poison();
  // "bf16[3664, 1536] on cuda"
  std::string describe() const;
  // What keeps this tensor's memory alive (for handing a result to a caller).
  std::shared_ptr<void> keepalive() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

// Throws an Error naming `what` unless `t` has exactly this dtype and shape.
// A shape entry of -1 matches any size.
void check_tensor(const Tensor& t, const char* what, DType dtype, const Shape& shape);
void check_same_device(const Tensor& a, const Tensor& b, const char* what);

}  // namespace s3d

namespace s3d {

// A strided 2-D window into a tensor's storage: `rows` rows of `cols` elements, the first
// element at `offset` (in elements), consecutive rows `stride` elements apart. This is how
// kernels read Q, K or V straight out of a packed [T, 3, H, D] buffer, or one chunk of a
// [B, 6C] modulation tensor, without a copy.
struct RowView {
  Tensor base;
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  // The whole of a contiguous tensor viewed as [size(0), numel / size(0)].
  static RowView of(const Tensor& t);
  // Columns [col_begin, col_begin + cols) of every row of a contiguous 2-D-viewable tensor.
  static RowView columns(const Tensor& t, int64_t col_begin, int64_t cols);

  DType dtype() const { return base.dtype(); }
  Device device() const { return base.device(); }
  const void* data() const;
  void* mutable_data();
  // Throws unless every addressed element lies inside `base`.
  void check_bounds(const char* what) const;
};

}  // namespace s3d
