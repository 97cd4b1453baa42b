// Device-wide memory during a measurement: what nvidia-smi would show, every process's and
// library's allocations alike (cudaMemGetInfo), read every 2 ms on a thread of its own, so
// that the bench can put the device's figure beside its allocator's (docs/BENCHMARK.md,
// "Device memory").
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>

namespace s3d::bench {

class DevicePeak {
 public:
  // Starts reading device `device` (no-op, peak 0, without CUDA).
  explicit DevicePeak(int device);
  ~DevicePeak();
  DevicePeak(const DevicePeak&) = delete;
  DevicePeak& operator=(const DevicePeak&) = delete;

  size_t start_bytes() const { return start_; }  // in use when reading began
  // Stops reading; the highest reading above start_bytes() (0 when none was higher).
  size_t stop();

 private:
  int device_;
  size_t start_ = 0;
  std::atomic<size_t> peak_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace s3d::bench
