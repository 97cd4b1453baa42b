// Frees the libraries' handles, plans, graphs and workspaces after the last GPU test, so
// that compute-sanitizer's leak check sees only what a test itself leaked.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "gemm/linear.h"

namespace {

class ReleaseGpuResources : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!s3d::cuda_available()) return;
    s3d::gemm::release_resources();
    s3d::attention::release_resources();
    s3d::DeviceAllocator::current().empty_cache();
  }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new ReleaseGpuResources);

}  // namespace
