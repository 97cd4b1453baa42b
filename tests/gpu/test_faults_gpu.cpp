// Fault injection on the GPU (core/fault.h, docs/RELIABILITY.md): every device allocation
// and every cuBLASLt plan / cuDNN graph build of a cold request (a fresh Engine on the tiny
// model, two assets, beyond with CUDA graphs) fails in turn (the sweep of tests/fault_sweep.h,
// which the CPU's host allocations go through too). Each run must end in one
// sparse3d::Error naming the injected fault, or succeed through a counted fallback; the
// Engine stays usable: a second request on it gives the reference bits, with no more device
// memory in use than an Engine that never failed (nothing stuck in use).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_util.h"
#include "core/fault.h"
#include "model/checkpoint.h"
#include "sparse3d/sparse3d.h"
#include "../array_bytes.h"
#include "../fault_sweep.h"
#include "../model_inputs.h"

namespace {

namespace fs = std::filesystem;
using s3d::fault::Point;

struct Outcome {
  std::string error;  // empty: the request succeeded
  bool fell_back = false;
  uint64_t seen = 0;  // the point's operations counted in the armed request
  int graphs_captured = 0;
  std::vector<uint8_t> latent;
  // Later fault-free requests on the same Engine (a new one when the fault came in its
  // constructor): each one's latent, and the device memory in use after each.
  std::vector<std::vector<uint8_t>> retries;
  std::vector<size_t> in_use;
  std::string state;  // the Engine's null-context state and fallbacks at the end
};

std::string describe_state(sparse3d::Engine& e) {
  std::string out;
  for (const auto& q : e.qualification()) {
    out += "L=" + std::to_string(q.context_tokens) + (q.applicable ? " applicable" : " not: " + q.reason);
    for (const auto& sh : q.shapes)
      out += "; N=" + std::to_string(sh.tokens) + (sh.batched ? " batched" : "") +
             " M=" + std::to_string(sh.m) + " " + sh.source;
    out += "\n";
  }
  for (const auto& f : e.counters().fallbacks)
    out += "fallback " + f.optimization + ": " + f.reason + "\n";
  return out;
}

struct FaultsGpu : ::testing::Test {
  void SetUp() override {
    if (!s3d::cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir = (fs::temp_directory_path() / ("sparse3d_faults_gpu_" + std::to_string(getpid()))).string();
    if (!fs::exists(dir + "/tiny.json"))
      s3d::model::make_checkpoint(s3d::model::preset("tiny"), 5, dir + "/tiny",
                                  sparse3d::DType::BF16);
    in = s3d::testing::synthetic_inputs({97, 45}, 13, 64, 32, 3);
  }
  void TearDown() override {
    for (int i = 0; i < s3d::fault::kPointCount; ++i) s3d::fault::arm(static_cast<Point>(i), 0);
  }

  // 8 steps: enough for both step kinds (CFG and not) to be graph-captured.
  sparse3d::SampleRequest request() { return s3d::testing::sample_request(in, 7, 8); }

  // A fresh Engine and one request with `point` armed at `n` (0: none); then, disarmed,
  // `retries` more requests on the same Engine.
  Outcome cold(Point point, uint64_t n, int retries) {
    Outcome o;
    sparse3d::EngineOptions opt;
    opt.device = sparse3d::DeviceChoice::CUDA;
    opt.persist_qualification = false;
    opt.qualify_m = {1};
    s3d::fault::arm(point, n);
    std::unique_ptr<sparse3d::Engine> e;
    try {
      e = std::make_unique<sparse3d::Engine>(dir + "/tiny.json", opt);
      const sparse3d::SampleResult r = e->sample(request());
      o.latent = bytes_of(r.latent);
      o.graphs_captured = r.stats.graphs_captured;
      o.fell_back = !e->counters().fallbacks.empty();
    } catch (const sparse3d::Error& err) {
      o.error = err.what();
    }
    o.seen = s3d::fault::count(point);
    s3d::fault::arm(point, 0);
    if (!e) e = std::make_unique<sparse3d::Engine>(dir + "/tiny.json", opt);
    if (o.error.empty()) o.in_use.push_back(e->counters().device_bytes_in_use);
    for (int i = 0; i < retries; ++i) {
      {
        const sparse3d::SampleResult r = e->sample(request());
        o.retries.push_back(bytes_of(r.latent));
      }
      o.in_use.push_back(e->counters().device_bytes_in_use);
    }
    o.state = describe_state(*e);
    return o;
  }

  // Every operation of `point` in a cold request, failed in turn (tests/fault_sweep.h).
  void sweep(Point point, const char* needle) {
    const Outcome ref = cold(point, 0, 2);
    const uint64_t per_request = ref.seen;  // counted in the armed request only
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    ASSERT_FALSE(ref.fell_back);
    ASSERT_GT(per_request, 0u);
    ASSERT_EQ(ref.retries.size(), 2u);
    EXPECT_EQ(ref.latent, ref.retries[0]);
    EXPECT_GT(ref.graphs_captured, 0) << "the sweep should cover graph capture too";
    // Repeated requests hold no more than the first left: no per-request growth.
    std::printf("%s: %llu per cold request; in use after requests 1, 2, 3: %zu %zu %zu bytes\n",
                s3d::fault::name(point), static_cast<unsigned long long>(per_request),
                ref.in_use[0], ref.in_use[1], ref.in_use[2]);
    std::fflush(stdout);
    EXPECT_EQ(ref.in_use[1], ref.in_use[2]) << "device memory in use grows with each request";
    const auto start = std::chrono::steady_clock::now();
    uint64_t less_in_use = 0;
    auto run = [&](uint64_t n) { return cold(point, n, 1); };
    auto check = [&](uint64_t n, const Outcome& o) {
      if (o.seen < n) return;  // the run past the last operation: checked by the sweep
      check_retry(point, n, o, ref, less_in_use);
      if (n % 50 == 0) {
        const auto took = std::chrono::steady_clock::now() - start;
        std::printf("  %llu done, %.1f s\n", static_cast<unsigned long long>(n),
                    std::chrono::duration<double>(took).count());
        std::fflush(stdout);
      }
    };
    const s3d::testing::SweepCounts c =
        s3d::testing::sweep_faults(point, needle, ref.latent, per_request, run, check);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s faults: %llu points, %llu clean errors, %llu counted fallbacks, %llu with "
                "less in use after, %.1f s\n",
                s3d::fault::name(point), static_cast<unsigned long long>(c.tried),
                static_cast<unsigned long long>(c.errors),
                static_cast<unsigned long long>(c.fallbacks),
                static_cast<unsigned long long>(less_in_use), seconds);
    RecordProperty("injection_points", static_cast<int>(c.tried));
  }

  // The Engine (or a new one, when the fault came in its constructor) still works, with the
  // same bits, and a failed request left nothing in use: after k good requests the Engine
  // holds what an Engine that never failed holds after its k-th.
  static void check_retry(Point point, uint64_t n, const Outcome& o, const Outcome& ref,
                          uint64_t& less_in_use) {
    EXPECT_EQ(o.retries[0], ref.latent) << s3d::fault::name(point) << " " << n;
    // More in use is a leak; less means a lazily-built cache (e.g. a layout's memoised
    // offsets) is not built yet: reported, with the Engine's state beside the clean one's.
    const size_t want_in_use = ref.in_use[o.in_use.size() - 1];
    EXPECT_LE(o.in_use.back(), want_in_use)
        << s3d::fault::name(point) << " " << n << " left memory in use: " << o.error;
    if (o.in_use.back() != want_in_use && less_in_use++ == 0)
      std::printf("  %s %llu: %zu bytes fewer in use than a clean Engine (%s)\n"
                  "  its state:\n%s  a clean Engine's:\n%s",
                  s3d::fault::name(point), static_cast<unsigned long long>(n),
                  want_in_use - o.in_use.back(), o.error.c_str(), o.state.c_str(),
                  ref.state.c_str());
  }

  std::string dir;
  s3d::sampler::Inputs in;
};

TEST_F(FaultsGpu, EveryDeviceAllocationOfAColdRequest) {
  sweep(Point::DeviceAlloc, "out of device memory");
}

TEST_F(FaultsGpu, EveryPlanBuildOfAColdRequest) { sweep(Point::PlanBuild, "build failed"); }

}  // namespace
