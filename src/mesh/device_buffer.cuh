// A device buffer of `count` elements of T for the mesh layer's CUDA sources, taken from the
// engine's allocator (at least one element, so that an empty stage still has an address).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace s3d::mesh {

template <class T>
struct DeviceBuffer {
  Tensor t;
  explicit DeviceBuffer(int64_t count)
      : t(Tensor::empty({(std::max<int64_t>(count, 1) * int64_t{sizeof(T)} + 3) / 4}, DType::I32,
                        Device::CUDA)) {}
  T* get() { return static_cast<T*>(t.data()); }
  const T* get() const { return static_cast<const T*>(t.data()); }
};

}  // namespace s3d::mesh
