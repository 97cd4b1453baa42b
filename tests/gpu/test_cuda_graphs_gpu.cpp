// Per-request CUDA graphs and the allocator's private pools they rely on.
// Contract: a loop with cuda_graphs gives the bits of the same loop without it (the same
// kernels on the same inputs), for every path, both CFG modes, an interval schedule and the
// guidance rescale, with and without step tables; fewer launches; no fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "contract/fallback.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "model/checkpoint.h"
#include "model/null_context.h"
#include "sampler/sampler.h"
#include "sparse3d/flags.h"
#include "gpu_test_util.h"
#include "model_inputs.h"
#include "null_context_checks.h"

namespace s3d {
namespace {

namespace fs = std::filesystem;

TEST(AllocatorPoolGpu, PoolBlocksStayThePoolsUntilReleased) {
  S3D_REQUIRE_CUDA();
  if (!DeviceAllocator::current().caching()) GTEST_SKIP() << "caching allocator off";
  auto& alloc = DeviceAllocator::current();
  const size_t bytes = 3u << 20;
  const uint64_t pool = alloc.create_pool();
  void* a = nullptr;
  {
    PoolScope scope(pool);
    a = alloc.allocate(bytes);
  }
  alloc.release(a, bytes);  // back to the pool, not to the shared cache
  void* shared = alloc.allocate(bytes);
  EXPECT_NE(shared, a) << "a pool's free block was handed out by the shared cache";
  void* again = nullptr;
  {
    PoolScope scope(pool);
    again = alloc.allocate(bytes);
  }
  EXPECT_EQ(again, a) << "the pool did not reuse its own block";
  const size_t reserved = alloc.stats().reserved_bytes;
  alloc.release_pool(pool);  // `again` is still in use: it becomes a shared block
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved);
  alloc.release(again, bytes);
  alloc.release(shared, bytes);
  void* reused = alloc.allocate(bytes);
  EXPECT_TRUE(reused == again || reused == shared);
  alloc.release(reused, bytes);
  {
    PoolScope scope(pool);  // released: allocating from it is an error, not a crash
    EXPECT_THROW(alloc.allocate(bytes), Error);
  }
}

struct CudaGraphsGpu : ::testing::Test {
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_graphs_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json"))
      model::make_checkpoint(model::preset("tiny"), 5, dir + "/tiny", DType::BF16);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    set_current_stream(s);
    contract::reset_fallbacks();
  }
  void TearDown() override { set_current_stream(nullptr); }
  std::string dir;
};

// spec with and without +cuda_graphs: same bits, graphs captured, fewer launches.
void expect_graphs_keep_the_bits(const model::Transformer& m, const sampler::Inputs& in,
                                 sampler::SamplerOptions o, const std::string& spec,
                                 const model::NullContext* nc) {
  SCOPED_TRACE(spec);
  o.apply(sparse3d::ExecutionPlan::parse(spec));
  o.null_context = nc;
  sampler::sample(m, in, o);  // warm-up: library caches
  synchronize();
  reset_launch_counts();
  const sampler::Output eager = sampler::sample(m, in, o, true);
  const uint64_t eager_launches = launch_counts().total;
  o.flags.set(sparse3d::Flag::cuda_graphs, true);
  reset_launch_counts();
  const sampler::Output graphed = sampler::sample(m, in, o, true);
  const uint64_t graph_launches = launch_counts().total;
  std::printf("[ graphs   ] %s: %d graphs (%zu nodes, capture %.1f ms), launches %llu -> %llu\n",
              spec.c_str(), graphed.graphs_captured, graphed.graph_nodes,
              graphed.graph_capture_seconds * 1e3,
              static_cast<unsigned long long>(eager_launches),
              static_cast<unsigned long long>(graph_launches));
  EXPECT_GE(graphed.graphs_captured, 1);
  EXPECT_LT(graph_launches, eager_launches);
  EXPECT_TRUE(testing::same_bits(graphed.latent, eager.latent, "latent"));
  EXPECT_TRUE(testing::same_bits(graphed.first_v_cond, eager.first_v_cond, "first v_cond"));
  EXPECT_TRUE(testing::same_bits(graphed.first_v_uncond, eager.first_v_uncond, "first v_uncond"));
}

TEST_F(CudaGraphsGpu, EveryPathKeepsItsBits) {
  model::Transformer m(model::load_checkpoint(dir + "/tiny.json", Device::CUDA));
  const auto in = testing::synthetic_inputs({333, 7}, 13, m.config().cond_channels, 32, 61);
  model::NullContext nc = model::NullContext::build(m, testing::qualified_options(13, {340}));
  for (bool interval : {false, true}) {
    sampler::SamplerOptions o;
    o.steps = 5;
    o.guidance_rescale = 0.3;
    if (interval) o.interval_lo = 0.4, o.interval_hi = 0.95;  // kinds alternate
    for (const char* spec :
         {"pure_eager", "pure_eager+batched_cfg", "kernel_fusion", "kernel_fusion+batched_cfg",
          "canonical_cache_combined+cond_kv_cache", "canonical_cache_combined+batched_cfg",
          "pure_eager+step_tables", "beyond-cuda_graphs"})
      expect_graphs_keep_the_bits(m, in, o, spec, &nc);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

// Full-width blocks (C 1536, H 12, D 128, L 4101; 2 blocks) at token counts that are not
// multiples of any tile.
TEST_F(CudaGraphsGpu, FullWidthBlocksKeepTheirBits) {
  model::ModelConfig c = model::preset("trellis2-shape-1024");
  c.num_blocks = 2;
  model::make_checkpoint(c, 13, dir + "/full2", DType::BF16);
  model::Transformer m(model::load_checkpoint(dir + "/full2.json", Device::CUDA));
  sampler::SamplerOptions o;
  o.steps = 3;
  for (int64_t tokens : {1001, 3664}) {
    const auto in = testing::synthetic_inputs({tokens}, 4101, c.cond_channels, c.out_channels, 62);
    for (const char* spec : {"pure_eager", "kernel_fusion+batched_cfg+step_tables"})
      expect_graphs_keep_the_bits(m, in, o, spec, nullptr);
  }
  EXPECT_TRUE(contract::fallback_counts().empty())
      << contract::format_fallbacks(contract::fallback_counts());
}

}  // namespace
}  // namespace s3d
