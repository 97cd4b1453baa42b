// The service protocol (docs/BENCHMARK.md, "Protocols"): what a user of a fresh service
// waits for. Per requested path: a new engine whose qualification cache folder is empty, one
// warm-up request at a token count no asset has, then every asset once in manifest order,
// each timed as the whole public call. With --devices ... --queue, the same assets as a
// queue served by one-GPU engines and by one engine split over the GPUs (serve_queue).
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "bench/format.h"
#include "bench/packing.h"
#include "bench/run_state.h"
#include "core/error.h"
#include "payload/generate.h"
#include "sparse3d/flags.h"

namespace s3d::bench {
namespace {

uint64_t fallback_total(const sparse3d::Counters& c) {
  uint64_t n = 0;
  for (const auto& f : c.fallbacks) n += f.count;
  return n;
}

// The warm-up request and the host tensors it reads.
struct WarmupRequest {
  sparse3d::SampleRequest request;
  PackedCopies copies;  // a dense model's two copies of the first asset
  Tensor coords, concat_cond;
  std::string what;
};

// The first `tokens` tokens of the largest asset (a valid, sorted layout of any length) or,
// for more, the grid's first voxels in raster order (zero concat_cond), with the first
// asset's condition; a dense model's requests are whole grids, so there it is two copies of
// the first asset in one request.
WarmupRequest warmup_request(const Run& run, sparse3d::Engine& engine, size_t pi) {
  WarmupRequest w;
  sparse3d::SampleRequest& q = w.request;
  q.sampler = run.o.sampler;
  q.flags = run.plans[pi].flags();
  const Prepared& first = run.assets.front();
  if (run.warmup_tokens == 0) {
    w.copies = pack_copies(first.asset, 2, engine.model().out_channels);
    q.batch = w.copies.batch;
    q.coords = view_of(w.copies.coords);
    q.cond = view_of(w.copies.cond);
    q.noise = view_of(w.copies.noise);
    if (w.copies.concat_cond.defined()) q.concat_cond = view_of(w.copies.concat_cond);
    w.what = cat("2 copies of ", first.info.name, " in one request (",
                 group_digits(2 * first.info.tokens), " tokens)");
    return w;
  }
  const Prepared* largest = &first;
  for (const auto& a : run.assets)
    if (a.info.tokens > largest->info.tokens) largest = &a;
  const int64_t n = run.warmup_tokens;
  const payload::Asset& big = largest->asset;
  if (n < largest->info.tokens) {
    w.coords = big.coords.rows(0, n);
    if (big.concat_cond.defined()) w.concat_cond = big.concat_cond.rows(0, n);
    w.what = cat("the first ", group_digits(n), " tokens of ", largest->info.name);
  } else {
    w.coords = payload::full_grid(run.manifest.grid).rows(0, n);
    if (big.concat_cond.defined())
      w.concat_cond = Tensor::zeros({n, big.concat_cond.size(1)}, DType::F32, Device::CPU);
    w.what = cat("the grid's first ", group_digits(n), " voxels in raster order");
  }
  q.coords = view_of(w.coords);
  if (w.concat_cond.defined()) q.concat_cond = view_of(w.concat_cond);
  q.cond = view_of(first.cond);
  q.seed = big.noise_seed;
  return w;
}

// One path's service protocol on `slot`'s new engine.
void serve_path(Run& run, size_t pi, EngineSlot& slot) {
  sparse3d::EngineOptions eo = engine_options(run, pi);
  eo.path = run.plans[pi].label();
  eo.cache_dir = slot.cache->path().string();
  eo.persist_qualification = true;
  run.log(cat("service protocol, path ", run.r.paths[pi], ": a new engine, qualification cache ",
              eo.cache_dir, " (empty)"));
  slot.engine.emplace(run.o.checkpoint, eo);
  sparse3d::Engine& engine = *slot.engine;
  if (engine.model().layout == "grid") run.warmup_tokens = 0;  // whole grids: no other count
  const WarmupRequest w = warmup_request(run, engine, pi);
  const TimedRequest warm = timed_request(engine, w.request);
  run.warmup_what = w.what;
  run.log(cat("[warm-up] ", w.what, " ", run.r.paths[pi], ": ", warm.wall_seconds, " s"));
  engine.reset_counters();  // fallbacks from the first requests on
  for (size_t ai = 0; ai < run.assets.size(); ++ai) {
    const TimedRequest t = timed_request(engine, run.request(pi, ai));
    Cell& c = run.cell(pi, ai);
    c.first_request_seconds = t.wall_seconds;
    c.first_request_setup_seconds = t.stats.setup_seconds;
    c.first_request_loop_seconds = t.stats.loop_seconds;
    c.first_request_counters = t.counters;
    run.loop_estimate[{pi, ai}] = t.stats.request_seconds();
    run.log(cat("[first request] ", c.asset, " (", run.assets[ai].info.tokens, " tokens) ",
                c.path, ": ", t.wall_seconds, " s (set-up ", t.stats.setup_seconds, " s, loop ",
                t.stats.loop_seconds, " s; ", t.counters.qualifications_run, " qualified, ",
                t.counters.qualification_cache_hits, " from cache, ", t.counters.fallbacks,
                " fallbacks)"));
  }
}

}  // namespace

Protocol parse_protocol(const std::string& name) {
  if (name == "repeated") return Protocol::Repeated;
  if (name == "service") return Protocol::Service;
  if (name == "both") return Protocol::Both;
  fail("bench --protocol: '", name, "' is not one of service, repeated, both");
}

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::Repeated: return "repeated";
    case Protocol::Service: return "service";
    case Protocol::Both: break;
  }
  return "both";
}

int64_t service_warmup_tokens(const std::vector<int64_t>& asset_tokens, int64_t requested,
                              int64_t grid_cells) {
  S3D_CHECK(!asset_tokens.empty(), "bench: the service protocol needs at least one asset");
  const auto [lo, hi] = std::minmax_element(asset_tokens.begin(), asset_tokens.end());
  const int64_t smallest = *lo, largest = *hi;
  auto taken = [&](int64_t n) {
    return std::find(asset_tokens.begin(), asset_tokens.end(), n) != asset_tokens.end();
  };
  S3D_CHECK(requested >= 0, "bench --warmup-tokens: must be >= 0, got ", requested);
  if (requested > 0) {
    S3D_CHECK(!taken(requested), "bench --warmup-tokens ", requested,
              ": an asset has that many tokens; the warm-up request must be at a token count "
              "outside the asset set");
    S3D_CHECK(requested <= grid_cells, "bench --warmup-tokens ", requested, ": the grid has ",
              grid_cells, " cells");
    return requested;
  }
  for (int64_t n = std::max<int64_t>(1, smallest * 3 / 4); n <= std::max(grid_cells, largest); ++n)
    if (!taken(n)) return n;
  fail("bench: every token count up to the grid's ", grid_cells,
       " is an asset's; the service protocol's warm-up request needs one outside the set");
}

ScratchFolder::ScratchFolder(const std::filesystem::path& parent) {
  std::string pattern = (parent / "sparse3d-bench-cache-XXXXXX").string();
  S3D_CHECK(mkdtemp(pattern.data()) != nullptr, "bench: cannot make a cache folder in ",
            parent.string());
  path_ = pattern;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ec;  // best effort: a folder left behind is only litter
  std::filesystem::remove_all(path_, ec);
}

TimedRequest timed_request(sparse3d::Engine& engine, const sparse3d::SampleRequest& q) {
  TimedRequest t;
  const sparse3d::Counters before = engine.counters();
  // sample() returns after its last step has finished on the device (the sampler
  // synchronises), as the previous request did: the host clock spans the device's work.
  const auto start = std::chrono::steady_clock::now();
  {
    const sparse3d::SampleResult result = engine.sample(q);
    const auto end = std::chrono::steady_clock::now();
    t.wall_seconds = std::chrono::duration<double>(end - start).count();
    t.stats = result.stats;
  }
  const sparse3d::Counters after = engine.counters();
  t.counters.qualifications_run = after.qualifications_run - before.qualifications_run;
  t.counters.qualification_cache_hits =
      after.qualification_cache_hits - before.qualification_cache_hits;
  t.counters.fallbacks = fallback_total(after) - fallback_total(before);
  return t;
}

namespace {

// A fresh engine of plan pi's path on `devices`, with its own cache folder, after its warm-up.
void queue_engine(Run& run, size_t pi, std::vector<int> devices, EngineSlot& slot) {
  sparse3d::EngineOptions eo = engine_options(run, pi);
  eo.devices = std::move(devices);
  eo.path = run.plans[pi].label();
  slot.cache = std::make_unique<ScratchFolder>(run.o.work_dir);
  eo.cache_dir = slot.cache->path().string();
  eo.persist_qualification = true;
  slot.engine.emplace(run.o.checkpoint, eo);
  const WarmupRequest w = warmup_request(run, *slot.engine, pi);
  timed_request(*slot.engine, w.request);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void serve_queue(Run& run) {
  const size_t pi = 0;  // the first requested path, on the first device alone (plan_devices)
  const std::vector<int>& devices = run.o.devices;
  const size_t n = run.assets.size();
  QueueRun independent{run.r.paths[pi], "independent", static_cast<int>(devices.size()), 1, 0,
                       std::vector<double>(n, 0.0)};
  {
    std::vector<std::unique_ptr<EngineSlot>> slots;
    for (int d : devices) {
      slots.push_back(std::make_unique<EngineSlot>());
      queue_engine(run, pi, {d}, *slots.back());
    }
    run.log(cat("queue: ", n, " assets over ", slots.size(), " engines of one GPU each"));
    std::atomic<size_t> next{0};
    std::vector<std::exception_ptr> errors(slots.size());
    std::vector<std::thread> servers;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t e = 0; e < slots.size(); ++e)
      servers.emplace_back([&, e] {
        try {
          for (size_t ai = next++; ai < n; ai = next++)
            independent.latency_seconds[ai] =
                timed_request(*slots[e]->engine, run.request(pi, ai)).wall_seconds;
        } catch (...) {
          errors[e] = std::current_exception();
        }
      });
    for (auto& t : servers) t.join();
    independent.wall_seconds = seconds_since(t0);
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  QueueRun split{run.r.paths[pi], "split", 1, static_cast<int>(devices.size()), 0,
                 std::vector<double>(n, 0.0)};
  {
    EngineSlot slot;
    queue_engine(run, pi, devices, slot);
    run.log(cat("queue: ", n, " assets on one engine over ", devices.size(), " GPUs"));
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t ai = 0; ai < n; ++ai)
      split.latency_seconds[ai] = timed_request(*slot.engine, run.request(pi, ai)).wall_seconds;
    split.wall_seconds = seconds_since(t0);
  }
  run.r.queue.push_back(std::move(independent));
  run.r.queue.push_back(std::move(split));
}

void first_requests(Run& run) {
  run.engine_of.assign(run.plans.size(), 0);
  for (size_t pi = 0; pi < run.plans.size(); ++pi) {
    if (run.ablation_variant[pi]) continue;
    auto slot = std::make_unique<EngineSlot>();
    slot->cache = std::make_unique<ScratchFolder>(run.o.work_dir);
    serve_path(run, pi, *slot);
    run.engine_of[pi] = run.slots.size();
    run.slots.push_back(std::move(slot));
  }
  // The leave-one-out variants: their reference (the last requested path) is measured last.
  for (size_t pi = 0; pi < run.plans.size(); ++pi)
    if (run.ablation_variant[pi]) run.engine_of[pi] = run.slots.size() - 1;
}

}  // namespace s3d::bench
