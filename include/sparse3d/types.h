// sparse3d public API: the error type, element types, devices and tensor views.
// Only the standard library is needed to include this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparse3d {

// The one error type of the engine. Every failure (bad input, bad checkpoint, a device that
// is full, a CUDA error) is an Error whose message names the input, what was expected and
// what was found: the same line `sparse3d` prints after "sparse3d: error: ".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

enum class DType : uint8_t { BF16, F32, I32 };
enum class Device : uint8_t { CPU, CUDA };

// A caller-owned, contiguous, row-major buffer: the engine reads from or writes into it and
// never copies it when it is already where and what the engine needs. `data` must stay
// valid for the call it is passed to. `device_index` is the CUDA ordinal (ignored on CPU).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  int device_index = 0;
  std::vector<int64_t> shape;

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  size_t nbytes() const;
  // "f32[3664, 32] on cuda:0"
  std::string describe() const;
};

// A tensor the engine allocated for a result: `view` stays valid while any copy of the
// Array lives (the owner keeps the memory; device memory returns to the engine's allocator,
// which outlives the Engine as long as an Array needs it).
struct Array {
  TensorView view;
  std::shared_ptr<void> owner;

  bool defined() const { return owner != nullptr; }
  // A host copy of the values as floats (bf16 and i32 converted): for tests and small outputs.
  std::vector<float> to_floats() const;
};

// The engine's version, "MAJOR.MINOR.PATCH".
const char* version();

// Where a Workspace takes its device memory from when not from the driver
// (Workspace::set_memory_source): a framework's caching allocator, so that what the
// workspace gives back (release_cache) stays cached for the framework's own tensors and the
// next request takes it back without a cudaMalloc. allocate(bytes) returns a block of at
// least `bytes` on the workspace's device, usable on any stream once the device's earlier work
// is done, or nullptr when the memory is not there (it may throw sparse3d::Error for any other
// failure); release(ptr) takes back a block allocate gave, once the engine's work on it is
// done. Both are called on the thread of the engine call that needs them (a request holds its
// engine's lock then), never under the workspace allocator's own lock nor while a CUDA graph is
// captured (a graph's private pool takes its memory from the driver).
struct DeviceMemorySource {
  std::string name;  // for messages: "PyTorch's caching allocator"
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* ptr)> release;
};

}  // namespace sparse3d
