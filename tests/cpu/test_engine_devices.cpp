// EngineOptions::devices (sequence parallelism over several GPUs) on the CPU backend: what
// is refused at construction, with one line naming it, and what a request on one device
// reports. The split itself is tested in tests/parallel/ (every P on one device) and, over
// several GPUs, in tests/gpu/test_sequence_parallel_gpu.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../model_inputs.h"
#include "core/context.h"
#include "engine_test_util.h"
#include "io_test_util.h"
#include "parallel/group.h"
#include "sparse3d/sparse3d.h"

namespace {

namespace fs = std::filesystem;

struct EngineDevices : ::testing::Test {
  void SetUp() override {
    cache = (fs::temp_directory_path() / ("sparse3d_devices_" + std::to_string(getpid()))).string();
  }
  void TearDown() override { fs::remove_all(cache); }
  sparse3d::EngineOptions options(std::vector<int> devices) const {
    sparse3d::EngineOptions o = s3d::test::cpu_options(cache);
    o.devices = std::move(devices);
    return o;
  }
  std::string cache;
};

TEST_F(EngineDevices, RefusesDevicesItCannotUse) {
  const std::string& tiny = s3d::test::kTinyCheckpoint;
  EXPECT_ERROR(sparse3d::Engine(tiny, options({0, 1})), "needs the GPU backend");
  EXPECT_ERROR(sparse3d::Engine(tiny, options({0, 0})), "device 0 is listed twice");
  EXPECT_ERROR(sparse3d::Engine(tiny, options({-1})), "-1 is not a CUDA device ordinal");
  sparse3d::EngineOptions few = options({0});
  few.parallel_min_tokens = 0;
  EXPECT_ERROR(sparse3d::Engine(tiny, few), "parallel_min_tokens must be >= 1, got 0");
  sparse3d::EngineOptions o = options({1, 2});
  o.device_index = 3;
  EXPECT_ERROR(sparse3d::Engine(tiny, o), "device_index (3) must be 0 or the same");
}

TEST_F(EngineDevices, OneDeviceRunsAndSaysSo) {
  sparse3d::Engine e(s3d::test::kTinyCheckpoint, options({0}));
  auto in = s3d::testing::synthetic_inputs({40}, 5, 64, 32, 3);
  sparse3d::SampleRequest r = s3d::testing::sample_request(in, 7, 2);
  const sparse3d::SampleResult res = e.sample(r);
  EXPECT_EQ(res.stats.devices, 1);
  EXPECT_EQ(res.stats.devices_reason, "one device");
  for (const auto& f : e.counters().fallbacks) EXPECT_NE(f.optimization, "sequence_parallel");
}

TEST(NcclGroup, IsRefusedWithOneLineWithoutAGpu) {
  // CI has the NCCL header (the group is built) but no GPU: making a group says why it
  // cannot, and nccl_version() never throws.
  EXPECT_FALSE(s3d::parallel::nccl_version().empty());
  s3d::Context cpu(-1);
  EXPECT_ERROR(s3d::parallel::make_nccl_group({&cpu}), "NCCL group");
  EXPECT_ERROR(s3d::parallel::make_nccl_group({}), "NCCL group");
}

}  // namespace
