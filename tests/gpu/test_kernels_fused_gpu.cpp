// The fused kernels in the model on the GPU (tiny preset): the eager launches kernel_fusion
// removes. kernel_fusion against pure_eager (bitwise without the epilogue, close with it) is
// in tests/device/test_fused_model.cpp and the op-level checks (each fused candidate against
// its op's reference chain on the GPU and against its CPU version) in
// tests/ops/test_fused_ops.cpp, both built into this suite too.
//
// Run with build/bin/sparse3d_gpu_tests --gtest_filter='Fused*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "model_inputs.h"
#include "sparse3d/flags.h"

namespace s3d {
namespace {

// ---- the model on the GPU (tiny preset) ----

namespace fs = std::filesystem;

struct FusedModelGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_fused_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json"))
      model::make_checkpoint(model::preset("tiny"), 5, dir + "/tiny", DType::BF16);
    contract::reset_fallbacks();
  }
  std::string dir;
};

// One conditional forward: the eager ops the fused kernels replace are gone.
TEST_F(FusedModelGpu, ReplacedEagerLaunchesAreGone) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CUDA));
  auto in = testing::synthetic_inputs({333}, 13, m.config().cond_channels, 32, 25);
  Tensor x = in.noise.to(Device::CUDA);
  Tensor t = Tensor::from_floats({500.0f}, {1}, DType::F32).to(Device::CUDA);
  Tensor cond = in.cond.to(Device::CUDA);
  auto count = [&](const std::string& spec) {
    model::Request req = m.prepare(in.coords, 1, 13);
    req.use_flags(sparse3d::ExecutionPlan::parse(spec).flags());
    m.forward(req, x, t, cond);  // warm-up
    synchronize();
    reset_launch_counts();
    m.forward(req, x, t, cond);
    synchronize();
    return launch_counts();
  };
  const LaunchCounts eager = count("pure_eager"),
                     fused = count("kernel_fusion+qk_rmsnorm_cross_inplace");
  const int blocks = m.config().num_blocks;
  std::cout << "[ launches ] one forward: pure_eager " << eager.total << ", kernel_fusion "
            << fused.total << "\n";
  for (const auto& [op, n] : fused.by_op) std::cout << "  kernel_fusion " << op << " " << n << "\n";
  auto get = [](const LaunchCounts& c, const char* op) {
    auto it = c.by_op.find(op);
    return it == c.by_op.end() ? uint64_t{0} : it->second;
  };
  EXPECT_EQ(get(fused, "gather_rows"), 0u);
  EXPECT_EQ(get(fused, "add_scalar"), 0u);
  EXPECT_EQ(get(fused, "rope_apply"), 0u);
  EXPECT_EQ(get(fused, "gelu_tanh"), 0u);
  EXPECT_EQ(get(fused, "head_rmsnorm"), uint64_t(blocks));  // the cross-attention K only
  EXPECT_EQ(get(fused, "qk_rmsnorm_rope_inplace"), uint64_t(blocks));
  EXPECT_EQ(get(fused, "qk_rmsnorm_cross_inplace"), uint64_t(blocks));
  EXPECT_EQ(get(fused, "modulated_layernorm"), uint64_t(2 * blocks));
  EXPECT_EQ(get(fused, "gated_residual_add"), uint64_t(2 * blocks));
  EXPECT_LT(fused.total, eager.total);
}

}  // namespace
}  // namespace s3d
