// The public Engine API on the GPU (tiny preset): device-resident outputs used in place, on
// the caller's stream, and the legacy and per-thread default streams joined to the engine's
// in order. What both backends check (progress, the qualification cache across Engines, new
// token counts, two Engines on two threads) is in tests/device/test_engine.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "sparse3d/sparse3d.h"
#include "../model_inputs.h"
#include "array_bytes.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::DType;
using sparse3d::Device;

struct EngineGpu : ::testing::Test {
  void SetUp() override {
    if (!s3d::cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_engine_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json"))
      s3d::model::make_checkpoint(s3d::model::preset("tiny"), 5, dir + "/tiny", DType::BF16);
    fs::remove_all(dir + "/cache");
  }
  sparse3d::EngineOptions options(const std::string& path) const {
    sparse3d::EngineOptions o;
    o.device = sparse3d::DeviceChoice::CUDA;
    o.path = path;
    o.cache_dir = dir + "/cache";
    return o;
  }
  // A request over device copies of `in` (kept alive in `keep`).
  static sparse3d::SampleRequest request(s3d::sampler::Inputs& in, std::vector<s3d::Tensor>& keep) {
    keep = {in.coords.to(s3d::Device::CUDA), in.cond.to(s3d::Device::CUDA),
            in.noise.to(s3d::Device::CUDA)};
    auto view = [](s3d::Tensor& t) {
      return sparse3d::TensorView{t.data(), t.dtype(), t.device(), 0, t.shape()};
    };
    sparse3d::SampleRequest r;
    r.coords = view(keep[0]);
    r.batch = in.batch;
    r.cond = view(keep[1]);
    r.noise = view(keep[2]);
    r.sampler = sparse3d::SamplerSettings::released();
    r.sampler.steps = 4;
    return r;
  }
  std::string dir;
};

TEST_F(EngineGpu, DeviceBuffersInPlaceOnTheCallersStream) {
  sparse3d::Engine e(dir + "/tiny.json", options(""));
  EXPECT_EQ(e.plan().label(), "fast");
  auto in = s3d::testing::synthetic_inputs({333, 61}, 13, 64, 32, 3);
  std::vector<s3d::Tensor> keep;
  sparse3d::SampleRequest r = request(in, keep);
  const sparse3d::SampleResult own = e.sample(r);
  EXPECT_EQ(own.latent.view.device, Device::CUDA);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  s3d::Tensor out = s3d::Tensor::empty({394, 32}, DType::F32, s3d::Device::CUDA);
  out.poison();
  r.out = {out.data(), DType::F32, Device::CUDA, 0, {394, 32}};
  r.cuda_stream = stream;
  const sparse3d::SampleResult given = e.sample(r);
  EXPECT_EQ(given.latent.view.data, out.data());
  EXPECT_EQ(bytes_of(own.latent), bytes_of(given.latent));
  EXPECT_TRUE(e.counters().fallbacks.empty());
  cudaStreamDestroy(stream);
}

TEST_F(EngineGpu, DefaultStreamsRunOnTheEnginesStreamInOrder) {
  // PyTorch's default stream is the legacy stream, which cannot hold a graph capture: the
  // engine runs on its own stream, joined to the caller's by events. Same bits, and the
  // caller's work queued before the call (a memset of the input) is seen by the engine.
  sparse3d::Engine e(dir + "/tiny.json", options(""));
  auto in = s3d::testing::synthetic_inputs({205, 77}, 13, 64, 32, 9);
  std::vector<s3d::Tensor> keep;
  sparse3d::SampleRequest r = request(in, keep);
  const std::vector<uint8_t> own = bytes_of(e.sample(r).latent);
  for (void* stream : {static_cast<void*>(cudaStreamLegacy), static_cast<void*>(cudaStreamPerThread)}) {
    r.cuda_stream = stream;
    EXPECT_EQ(bytes_of(e.sample(r).latent), own);
  }
  // Noise zeroed on the legacy stream just before the call: a different latent.
  s3d::Tensor zero_noise = s3d::Tensor::empty(keep[2].shape(), DType::F32, s3d::Device::CUDA);
  ASSERT_EQ(cudaMemcpy(zero_noise.data(), keep[2].data(), keep[2].nbytes(), cudaMemcpyDeviceToDevice),
            cudaSuccess);
  r.noise.data = zero_noise.data();
  ASSERT_EQ(cudaMemsetAsync(zero_noise.data(), 0, zero_noise.nbytes(), cudaStreamLegacy), cudaSuccess);
  r.cuda_stream = cudaStreamLegacy;
  const std::vector<uint8_t> from_zero = bytes_of(e.sample(r).latent);
  EXPECT_NE(from_zero, own);
  r.cuda_stream = nullptr;
  EXPECT_EQ(bytes_of(e.sample(r).latent), from_zero);
  EXPECT_TRUE(e.counters().fallbacks.empty());
}

}  // namespace
