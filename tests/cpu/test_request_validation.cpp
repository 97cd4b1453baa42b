// What the public API refuses, and that it refuses it before doing any work on the request's
// behalf (docs/API.md, "Validation"): coordinates the model would refuse, on the default
// path, before the null-context probe and qualification and before the cache is written;
// requests whose estimated memory exceeds what the host has (or the engine's cap), before
// anything is allocated; non-finite values in every host input by name; sampler settings
// outside their documented ranges. Each refusal is one error naming the problem, fast.
#include <gtest/gtest.h>

#include <cstring>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "engine_test_util.h"
#include "sparse3d/sparse3d.h"

namespace {

namespace fs = std::filesystem;
using sparse3d::Device;
using sparse3d::DType;

const std::string& kTiny = s3d::test::kTinyCheckpoint;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The process's peak resident set, bytes (Linux reports KiB).
size_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

// Runs `f`, expects a sparse3d::Error containing `needle`, and returns the seconds it took.
double refused(const std::function<void()>& f, const std::string& needle) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const sparse3d::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  return seconds_since(t0);
}

// Read-only zero pages of `bytes` reserved but never backed (MAP_NORESERVE): a caller's
// buffer as large as a request may claim, which costs nothing unless it is read.
struct ZeroPages {
  explicit ZeroPages(size_t n) : bytes(n) {
    data = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) data = nullptr;
  }
  ~ZeroPages() {
    if (data) munmap(data, bytes);
  }
  void* data = nullptr;
  size_t bytes = 0;
};

struct RequestValidation : ::testing::Test {
  static void SetUpTestSuite() {
    dir = (fs::temp_directory_path() / ("sparse3d_validation_" + std::to_string(getpid())))
              .string();
    fs::remove_all(dir);
    s3d::model::make_checkpoint(s3d::model::preset("tiny-ss"), 4, dir + "/tiny-ss", DType::BF16);
    s3d::model::ModelConfig tex = s3d::model::preset("tiny");  // a texture model
    tex.in_channels = tex.out_channels + 8;
    s3d::model::make_checkpoint(tex, 5, dir + "/tiny-tex", DType::BF16);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  void SetUp() override {
    cache = dir + "/cache-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  sparse3d::EngineOptions options(const std::string& path = "") const {
    return s3d::test::cpu_options(cache, path);
  }

  // One asset of the first `tokens` cells of a 64-wide grid (x fastest), L = 9 conditions.
  void make_inputs(int64_t tokens, int channels = 64) {
    coords.assign(static_cast<size_t>(4 * tokens), 0);
    for (int64_t t = 0; t < tokens; ++t) {
      coords[4 * t + 1] = static_cast<int32_t>(t / 4096);
      coords[4 * t + 2] = static_cast<int32_t>((t / 64) % 64);
      coords[4 * t + 3] = static_cast<int32_t>(t % 64);
    }
    cond.assign(static_cast<size_t>(9 * channels), 0.5f);
    T = tokens;
    C = channels;
  }
  sparse3d::SampleRequest request() {
    sparse3d::SampleRequest r;
    r.coords = {coords.data(), DType::I32, Device::CPU, 0, {T, 4}};
    r.cond = {cond.data(), DType::F32, Device::CPU, 0, {1, 9, C}};
    r.seed = 1;
    r.sampler.steps = 2;
    r.sampler.interval_lo = 0.0;
    return r;
  }

  static std::string dir;
  std::string cache;
  std::vector<int32_t> coords;
  std::vector<float> cond;
  int64_t T = 0;
  int C = 64;
};
std::string RequestValidation::dir;

// The default path qualifies the null context per token count: coordinates the model refuses
// must be refused before that, so a bad request of 2^16 rows costs only its check and leaves
// nothing in the cache.
TEST_F(RequestValidation, BadCoordinatesOnTheDefaultPathAreRefusedBeforeAnyWork) {
  sparse3d::Engine e(kTiny, options());
  make_inputs(int64_t{1} << 16);
  const std::vector<std::pair<std::function<void()>, std::string>> breakages = {
      {[&] { coords[4 * 40000 + 2] = 70000; }, "has y = 70000"},
      {[&] { coords[4 * 40000] = 1; }, "batch index 1, but the batch has 1 assets"},
      {[&] { coords[4 * 40000 + 3] = -1; }, "has z = -1"},
  };
  for (const auto& [breakage, needle] : breakages) {
    make_inputs(int64_t{1} << 16);
    breakage();
    sparse3d::SampleRequest r = request();
    EXPECT_LT(refused([&] { e.sample(r); }, needle), 1.0);
    sparse3d::ForwardRequest f;
    std::vector<float> x(static_cast<size_t>(T) * 32, 0.0f);
    float t = 500.0f;
    f.x = {x.data(), DType::F32, Device::CPU, 0, {T, 32}};
    f.t = {&t, DType::F32, Device::CPU, 0, {1}};
    f.coords = r.coords;
    f.cond = r.cond;
    EXPECT_LT(refused([&] { e.forward(f); }, needle), 1.0);
  }
  // Batches out of order: asset 1's rows before asset 0's.
  make_inputs(64);
  for (int t = 0; t < 32; ++t) coords[4 * t] = 1;
  cond.resize(2 * 9 * 64, 0.5f);
  sparse3d::SampleRequest r = request();
  r.batch = 2;
  r.cond.shape = {2, 9, 64};
  EXPECT_LT(refused([&] { e.sample(r); }, "asset 0 has no rows"), 1.0);
  // Nothing was probed, qualified or written.
  EXPECT_EQ(e.counters().qualifications_run, 0u);
  EXPECT_TRUE(e.qualification().empty());
  EXPECT_FALSE(fs::exists(cache + "/qualification.json"));
  // A warm-up with one count out of range warms none of them.
  EXPECT_LT(refused([&] { e.warm_up({61, 1 << 20}, 9); }, "token count 1048576"), 1.0);
  EXPECT_TRUE(e.qualification().empty());
  EXPECT_FALSE(fs::exists(cache + "/qualification.json"));
  // The engine serves a good request afterwards.
  make_inputs(61);
  EXPECT_EQ(e.sample(request()).latent.view.shape, (std::vector<int64_t>{61, 32}));
}

// The CPU backend sizes a request against host memory (or max_device_memory_gib) before it
// allocates anything: an oversized request is one error naming the estimate, in well under a
// second, and the process's peak memory does not grow by what it asked for.
TEST_F(RequestValidation, OversizedRequestsAreRefusedBeforeAnyAllocation) {
  sparse3d::Engine e(kTiny, options());
  const size_t rss_before = peak_rss();
  // 2^31 - 1 rows claimed over zero pages: the request's memory, not its coordinates, is
  // checked first, so none of their 32 GiB (nor the 128 GiB of a forward's x, nor the 256
  // GiB of a condition of 2^30 tokens) is read.
  const int64_t rows = INT32_MAX;
  ZeroPages pages(size_t{1} << 38);
  ASSERT_NE(pages.data, nullptr);
  make_inputs(61);
  sparse3d::SampleRequest r = request();
  r.coords = {pages.data, DType::I32, Device::CPU, 0, {rows, 4}};
  EXPECT_LT(refused([&] { e.sample(r); }, "GiB of host memory for activations"), 1.0);
  sparse3d::ForwardRequest f;
  f.coords = r.coords;
  f.cond = r.cond;
  f.x = {pages.data, DType::BF16, Device::CPU, 0, {rows, 32}};
  float t = 500.0f;
  f.t = {&t, DType::F32, Device::CPU, 0, {1}};
  EXPECT_LT(refused([&] { e.forward(f); }, "GiB of host memory for activations"), 1.0);
  // More rows than the layouts' int32 offsets hold.
  r.coords.shape = {rows + 1, 4};
  EXPECT_LT(refused([&] { e.sample(r); }, "at most 2147483647"), 1.0);
  // A condition of 2^30 tokens for 61 tokens.
  r = request();
  r.cond = {pages.data, DType::F32, Device::CPU, 0, {1, int64_t{1} << 30, 64}};
  EXPECT_LT(refused([&] { e.sample(r); }, "1073741824 condition tokens"), 1.0);
  // A warm-up with as large a condition: refused before its condition is drawn.
  EXPECT_LT(refused([&] { e.warm_up({61}, 1 << 30); }, "GiB of host memory"), 1.0);
  EXPECT_LT(peak_rss(), rss_before + (256u << 20));
  EXPECT_EQ(e.counters().qualifications_run, 0u);
  EXPECT_FALSE(fs::exists(cache + "/qualification.json"));
  // fits() gives the same answer without running anything.
  EXPECT_NE(e.fits(rows, 1, 9, e.plan().flags()).find("host memory"), std::string::npos);
  EXPECT_EQ(e.fits(61, 1, 9, e.plan().flags()), "");
}

// The CPU backend's attention is quadratic: a request that fits in memory but would run for
// hours is refused by its token count before any work (one past the cap: some 0.5 GiB of
// activations, which fits on any machine the tests run on).
TEST_F(RequestValidation, TheCpuBackendRefusesMoreTokensThanItsCap) {
  sparse3d::Engine e(kTiny, options());
  make_inputs((int64_t{1} << 17) + 1);
  sparse3d::SampleRequest r = request();
  EXPECT_LT(refused([&] { e.sample(r); }, "131073 tokens in one request on the CPU backend"),
            1.0);
  EXPECT_NE(e.fits(int64_t{1} << 20, 1, 9, e.plan().flags()).find("at most 131072"),
            std::string::npos);
  EXPECT_EQ(e.counters().qualifications_run, 0u);
}

// Under a memory limit the engine drops cond_kv_cache, then batched_cfg, each a counted
// fallback naming the sizes; a request that does not fit even without them is refused before
// anything runs and counts nothing. The limit caps host memory on the CPU backend, so the
// ladder is checked here without a GPU: the smallest limit (in 2% steps) that runs the
// request runs it with both dropped (serial CFG needs some 20% less than batched here).
TEST_F(RequestValidation, AMemoryLimitDropsTheCostlyFlagsInOrderBeforeRefusing) {
  // Enough tokens that the activations, not the engine's fixed buffers, set the estimate.
  make_inputs(3000);
  double cap = 0.03;
  for (int i = 0; i < 400; ++i, cap *= 1.02) {
    sparse3d::EngineOptions o = options("beyond");
    o.max_device_memory_gib = cap;
    sparse3d::Engine e(kTiny, o);
    try {
      e.sample(request());
    } catch (const sparse3d::Error& err) {
      EXPECT_NE(std::string(err.what()).find("nothing was run"), std::string::npos) << err.what();
      EXPECT_TRUE(e.counters().fallbacks.empty()) << "a refused request counted a fallback";
      continue;
    }
    bool kv = false, batched = false;
    for (const auto& f : e.counters().fallbacks) {
      kv |= f.optimization == "cond_kv_cache" && f.reason.find("GiB available") != std::string::npos;
      batched |=
          f.optimization == "batched_cfg" && f.reason.find("GiB available") != std::string::npos;
    }
    EXPECT_TRUE(kv && batched) << "at " << cap << " GiB: " << e.counters().fallbacks.size()
                               << " fallbacks";
    return;
  }
  FAIL() << "no limit up to " << cap << " GiB ran the request";
}

// fit_to_reference (the Python drop-in's default): the request's estimate is held to what
// the original PyTorch module would allocate for it, one CFG branch at a time. Here, with
// batched CFG and the condition K/V cache requested, both are above it: each is dropped, in
// that order, as a counted fallback naming the reference, and the result is the bits of the
// same path without them. Nothing is refused for it, however small the reference.
TEST_F(RequestValidation, FitToReferenceDropsTheCostlyFlagsAboveWhatPyTorchWouldAllocate) {
  make_inputs(3000);
  sparse3d::EngineOptions o = options("beyond");
  o.fit_to_reference = true;
  sparse3d::Engine e(kTiny, o);
  const sparse3d::SampleResult fitted = e.sample(request());
  std::vector<std::string> dropped;
  for (const auto& f : e.counters().fallbacks)
    if (f.reason.find("what the original PyTorch module would allocate") != std::string::npos)
      dropped.push_back(f.optimization);
  EXPECT_EQ(dropped, (std::vector<std::string>{"batched_cfg", "cond_kv_cache"}))
      << "(counters list fallbacks by name)";
  sparse3d::Engine plain(kTiny, options("beyond-batched_cfg-cond_kv_cache"));
  const sparse3d::SampleResult want = plain.sample(request());
  ASSERT_EQ(fitted.latent.view.nbytes(), want.latent.view.nbytes());
  EXPECT_EQ(std::memcmp(fitted.latent.view.data, want.latent.view.data,
                        want.latent.view.nbytes()), 0);
  // Without fit_to_reference the same engine options keep both (the host has room).
  sparse3d::Engine roomy(kTiny, options("beyond"));
  roomy.sample(request());
  for (const auto& f : roomy.counters().fallbacks)
    EXPECT_TRUE(f.optimization != "batched_cfg" && f.optimization != "cond_kv_cache")
        << f.optimization << ": " << f.reason;
}

TEST_F(RequestValidation, MaxDeviceMemoryCapsTheCpuBackendsRequests) {
  sparse3d::EngineOptions o = options("pure_eager");
  o.max_device_memory_gib = 0.25;
  sparse3d::Engine e(kTiny, o);
  make_inputs(int64_t{1} << 18);  // some 0.9 GiB of activations
  sparse3d::SampleRequest r = request();
  EXPECT_LT(refused([&] { e.sample(r); }, "under max_device_memory_gib"), 1.0);
  make_inputs(61);
  EXPECT_EQ(e.sample(request()).latent.view.shape, (std::vector<int64_t>{61, 32}));
}

TEST_F(RequestValidation, ScheduleAndStepsAreBoundedBeforeAnythingIsAllocated) {
  sparse3d::SamplerSettings s;
  s.steps = 1000000000;
  EXPECT_LT(refused([&] { sparse3d::timesteps(s); }, "steps must be in [1, 10000]"), 1.0);
  s.steps = 10001;
  EXPECT_LT(refused([&] { s.validate(); }, "steps must be in [1, 10000], got 10001"), 1.0);
  s.steps = 10000;
  EXPECT_EQ(sparse3d::timesteps(s).size(), 10001u);
  sparse3d::Engine e(kTiny, options());
  make_inputs(61);
  sparse3d::SampleRequest r = request();
  r.sampler.steps = 1000000000;
  EXPECT_LT(refused([&] { e.sample(r); }, "steps must be in [1, 10000]"), 1.0);
}

// Every double setting outside its range, NaN and infinity included, is refused by
// validate(), by timesteps() and by sample(), with the same message.
TEST_F(RequestValidation, SamplerSettingsOutOfRangeAreRefused) {
  using Edit = std::function<void(sparse3d::SamplerSettings&)>;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<Edit, std::string>> bad = {
      {[](auto& s) { s.steps = 0; }, "steps must be in [1, 10000], got 0"},
      {[](auto& s) { s.steps = -3; }, "steps must be in [1, 10000], got -3"},
      {[](auto& s) { s.guidance = -1; }, "guidance strength must be finite and >= 0, got -1"},
      {[&](auto& s) { s.guidance = nan; }, "guidance strength must be finite"},
      {[&](auto& s) { s.guidance = inf; }, "guidance strength must be finite"},
      {[](auto& s) { s.interval_lo = -5, s.interval_hi = -1; }, "must lie within [0, 1]"},
      {[](auto& s) { s.interval_lo = 0.5, s.interval_hi = 1.5; }, "must lie within [0, 1]"},
      {[](auto& s) { s.interval_lo = 0.9, s.interval_hi = 0.1; }, "is not an interval"},
      {[&](auto& s) { s.interval_lo = nan; }, "is not an interval"},
      {[&](auto& s) { s.interval_hi = inf; }, "is not an interval"},
      {[](auto& s) { s.rescale_t = 0; }, "rescale_t must be finite and > 0"},
      {[](auto& s) { s.rescale_t = -2; }, "rescale_t must be finite and > 0"},
      {[&](auto& s) { s.rescale_t = nan; }, "rescale_t must be finite and > 0"},
      {[&](auto& s) { s.rescale_t = inf; }, "rescale_t must be finite and > 0"},
      {[](auto& s) { s.guidance_rescale = -0.1; }, "guidance rescale must be in [0, 1]"},
      {[](auto& s) { s.guidance_rescale = 1.5; }, "guidance rescale must be in [0, 1]"},
      {[&](auto& s) { s.guidance_rescale = nan; }, "guidance rescale must be in [0, 1]"},
      {[](auto& s) { s.sigma_min = -1e-5; }, "sigma_min must be in [0, 1)"},
      {[](auto& s) { s.sigma_min = 1; }, "sigma_min must be in [0, 1)"},
      {[&](auto& s) { s.sigma_min = nan; }, "sigma_min must be in [0, 1)"},
  };
  sparse3d::Engine e(kTiny, options());
  make_inputs(61);
  for (const auto& [edit, needle] : bad) {
    SCOPED_TRACE(needle);
    sparse3d::SamplerSettings s;
    edit(s);
    refused([&] { s.validate(); }, needle);
    refused([&] { sparse3d::timesteps(s); }, needle);
    sparse3d::SampleRequest r = request();
    r.sampler = s;
    refused([&] { e.sample(r); }, needle);
  }
  // The edges of each range are settings a request takes.
  for (const Edit& edge : std::vector<Edit>{
           [](auto& s) { s.guidance = 0; }, [](auto& s) { s.interval_lo = 0, s.interval_hi = 0; },
           [](auto& s) { s.interval_lo = 1, s.interval_hi = 1; },
           [](auto& s) { s.guidance_rescale = 0; }, [](auto& s) { s.guidance_rescale = 1; },
           [](auto& s) { s.sigma_min = 0; }, [](auto& s) { s.steps = 1; }}) {
    sparse3d::SamplerSettings s;
    edge(s);
    EXPECT_NO_THROW(s.validate());
  }
  EXPECT_EQ(e.counters().requests, 0u);
}

// A NaN or infinity in any host input is refused by the input's name and the element's
// index: it could only give a latent of NaN.
TEST_F(RequestValidation, NonFiniteHostInputsAreRefusedByName) {
  sparse3d::Engine e(kTiny, options());
  make_inputs(61);
  for (const float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    std::vector<float> noise(61 * 32, 0.1f);
    noise[77] = bad;
    sparse3d::SampleRequest r = request();
    r.noise = {noise.data(), DType::F32, Device::CPU, 0, {61, 32}};
    refused([&] { e.sample(r); }, "noise element 77 is not finite");
    r = request();
    cond[5] = bad;
    refused([&] { e.sample(r); }, "cond element 5 is not finite");
    cond[5] = 0.5f;

    std::vector<float> x(61 * 32, 0.1f);
    float t = 500.0f;
    sparse3d::ForwardRequest f;
    f.x = {x.data(), DType::F32, Device::CPU, 0, {61, 32}};
    f.t = {&t, DType::F32, Device::CPU, 0, {1}};
    f.coords = r.coords;
    f.cond = r.cond;
    x[100] = bad;
    refused([&] { e.forward(f); }, "x element 100 is not finite");
    x[100] = 0.1f;
    // x in bf16: 0x7fc0 is NaN, 0x7f80 infinity, 0xff80 minus infinity.
    std::vector<uint16_t> xb(61 * 32, 0x3f80);  // 1.0
    xb[3] = std::isnan(bad) ? 0x7fc0 : bad > 0 ? 0x7f80 : 0xff80;
    f.x = {xb.data(), DType::BF16, Device::CPU, 0, {61, 32}};
    refused([&] { e.forward(f); }, "x element 3 is not finite");
    f.x = {x.data(), DType::F32, Device::CPU, 0, {61, 32}};
    t = bad;
    refused([&] { e.forward(f); }, "t element 0 is not finite");
  }
  EXPECT_EQ(e.counters().requests, 0u);
  EXPECT_FALSE(fs::exists(cache + "/qualification.json"));
}

TEST_F(RequestValidation, NonFiniteVolumeAndConcatInputsAreRefusedByName) {
  {
    sparse3d::Engine e(dir + "/tiny-ss.json", options());
    const int R = 8, out = e.model().out_channels, cc = e.model().cond_channels;
    std::vector<float> c(9 * cc, 0.5f), volume(out * R * R * R, 0.1f);
    volume[300] = kNaN;
    sparse3d::SampleRequest r;
    r.cond = {c.data(), DType::F32, Device::CPU, 0, {1, 9, cc}};
    r.noise = {volume.data(), DType::F32, Device::CPU, 0, {1, out, R, R, R}};
    r.sampler.steps = 2;
    refused([&] { e.sample(r); }, "noise element 300 is not finite");
    float t = 500.0f;
    sparse3d::ForwardRequest f;
    f.x = r.noise;
    f.t = {&t, DType::F32, Device::CPU, 0, {1}};
    f.cond = r.cond;
    refused([&] { e.forward(f); }, "x element 300 is not finite");
  }
  sparse3d::Engine e(dir + "/tiny-tex.json", options());
  const int out = e.model().out_channels, cc = e.model().cond_channels;
  make_inputs(61, cc);
  std::vector<float> concat(61 * 8, 0.0f);
  concat[17] = kInf;
  sparse3d::SampleRequest r = request();
  r.concat_cond = {concat.data(), DType::F32, Device::CPU, 0, {61, 8}};
  refused([&] { e.sample(r); }, "concat_cond element 17 is not finite");
  std::vector<float> x(61 * static_cast<size_t>(out), 0.1f);
  float t = 500.0f;
  sparse3d::ForwardRequest f;
  f.x = {x.data(), DType::F32, Device::CPU, 0, {61, out}};
  f.t = {&t, DType::F32, Device::CPU, 0, {1}};
  f.coords = r.coords;
  f.cond = r.cond;
  f.concat_cond = r.concat_cond;
  refused([&] { e.forward(f); }, "concat_cond element 17 is not finite");
  concat[17] = 0.0f;
  EXPECT_EQ(e.sample(r).latent.view.shape, (std::vector<int64_t>{61, out}));
}

TEST(HostMemory, ParsesMeminfoAndCgroupFiles) {
  EXPECT_EQ(s3d::parse_mem_available("MemTotal: 100 kB\nMemFree: 5 kB\nMemAvailable:   "
                                     "24028668 kB\n"),
            size_t{24028668} * 1024);
  EXPECT_FALSE(s3d::parse_mem_available("MemTotal: 100 kB\n").has_value());
  EXPECT_FALSE(s3d::parse_mem_available("XMemAvailable: 5 kB\n").has_value());
  EXPECT_FALSE(s3d::parse_cgroup_limit("max\n").has_value());
  EXPECT_EQ(s3d::parse_cgroup_limit("1073741824\n"), size_t{1} << 30);
  EXPECT_EQ(s3d::parse_cgroup_stat("anon 5\nfile 4096\nkernel 3\n", "file"), size_t{4096});
  EXPECT_FALSE(s3d::parse_cgroup_stat("anon 5\nfile_mapped 7\n", "file").has_value());
  EXPECT_TRUE(s3d::host_memory_available().has_value());  // Linux, where the suite runs
}

}  // namespace
