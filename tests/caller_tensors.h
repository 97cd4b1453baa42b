// A checkpoint's tensors where a PyTorch module keeps them, for the tests of borrowed weights
// (InMemoryCheckpoint::borrow): on the host, or each in an allocation of its own on the GPU
// (as PyTorch's caching allocator hands them out, 512-byte aligned), in their run-time dtypes.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "sparse3d/sparse3d.h"

namespace s3d::testing {

struct CallerTensors {
  model::Checkpoint host;  // the tensors (the GPU copies' source)
  std::vector<void*> device_blocks;
  sparse3d::InMemoryCheckpoint ck;  // borrowing them

  CallerTensors(const std::string& checkpoint, bool on_gpu, std::shared_ptr<void> keep_alive)
      : host(model::read_checkpoint(checkpoint)) {
    ck.config_json = model::config_to_json(host.config).dump();
    ck.name = "caller's tensors";
    ck.borrow = true;
    ck.keep_alive = std::move(keep_alive);
    for (auto& [name, t] : host.tensors) {
      void* data = t.data();
      if (on_gpu) {
        EXPECT_EQ(cudaMalloc(&data, t.nbytes()), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(data, t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
        device_blocks.push_back(data);
      }
      ck.tensors.emplace_back(name, sparse3d::TensorView{data, t.dtype(),
                                                         on_gpu ? sparse3d::Device::CUDA
                                                                : sparse3d::Device::CPU,
                                                         0, t.shape()});
    }
  }
  ~CallerTensors() {
    for (void* p : device_blocks) cudaFree(p);
  }
  CallerTensors(const CallerTensors&) = delete;
  CallerTensors& operator=(const CallerTensors&) = delete;
};

}  // namespace s3d::testing
