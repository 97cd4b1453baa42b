// Engine requests: sample(), forward(), warm_up() (include/sparse3d/engine.h).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <map>

#include "contract/fingerprint.h"
#include "core/allocator.h"
#include "core/bf16.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fallback.h"
#include "core/first_use.h"
#include "core/host_memory.h"
#include "core/profiler.h"
#include "engine/engine_impl.h"
#include "kernels/elementwise.h"
#include "kernels/volume_layout.h"
#include "model/family.h"
#include "model/trunk/transformer.h"
#include "sampler/step_plan.h"

namespace sparse3d {
namespace {

using s3d::Tensor;

double gib(size_t bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Coordinates on the host (the request's layout is computed there once), checked.
Tensor host_coords(const TensorView& view) {
  Tensor c = borrow(view, "coords");
  s3d::check_tensor(c, "coords", DType::I32, {-1, 4});
  return c.device() == Device::CPU ? c : c.to(Device::CPU);
}

// Throws unless every element of a host tensor (f32 or bf16) is finite, naming `what` and the
// first element that is not; read in place, nothing allocated. Device tensors are not scanned
// (docs/API.md, "Validation"): that would cost a kernel and a copy per input per request.
void check_finite(const Tensor& t, const char* what) {
  if (!t.defined() || t.device() != Device::CPU) return;
  const int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    const float* p = t.data_as<float>();
    for (int64_t i = 0; i < n; ++i)
      S3D_CHECK(std::isfinite(p[i]), what, " element ", i, " is not finite (", p[i], ")");
  } else if (t.dtype() == DType::BF16) {
    const auto* p = static_cast<const uint16_t*>(t.data());
    for (int64_t i = 0; i < n; ++i) {
      const float v = s3d::bf16_to_float(p[i]);
      S3D_CHECK(std::isfinite(v), what, " element ", i, " is not finite (", v, ")");
    }
  }
}

// A condition [B, L, channels], bf16 or f32, its shape checked (its values by check_finite).
// The request's layouts hold B L as int32.
Tensor condition(const TensorView& view, int batch, int channels) {
  Tensor c = borrow(view, "cond");
  S3D_CHECK(c.ndim() == 3 && c.size(0) == batch && c.size(2) == channels && c.size(1) >= 1,
            "cond must be [", batch, ", L, ", channels, "] with L >= 1, got ", view.describe());
  S3D_CHECK(c.dtype() == DType::BF16 || c.dtype() == DType::F32, "cond must be bf16 or f32, got ",
            view.describe());
  S3D_CHECK(c.size(1) <= INT32_MAX / batch, "cond has ", c.size(1), " tokens per asset; ",
            batch, " assets may have at most ", INT32_MAX / batch, " each");
  return c;
}

// A view left at its default: no data and no shape (a shape without data is a caller's
// mistake, refused by borrow()).
bool absent(const TensorView& view) { return view.empty() && view.shape.empty(); }

// Whether the model's assets are whole grids (AssetLayout::Grid): such a request may leave
// coords out and give volumes [B, C, R, R, R] instead of tokens.
bool grid_layout(const s3d::model::Transformer& m) {
  return m.family().layout() == s3d::model::AssetLayout::Grid;
}

void require_coords(const s3d::model::Transformer& m) {
  S3D_CHECK(grid_layout(m), "coords are required: a ", m.config().family,
            " samples the voxels the coordinates name (only a model whose assets are whole "
            "grids, as the SparseStructureFlowModel's, takes volumes without coords)");
}

// The request's token count from the shapes alone (nothing read, nothing allocated): the
// coordinates' rows, or for a grid-layout model without them (volume layout) B whole grids.
int64_t request_tokens(const TensorView& coords, int batch, const s3d::model::Transformer& m) {
  int64_t tokens = 0;
  if (absent(coords)) {
    require_coords(m);
    tokens = int64_t(batch) * m.config().grid_tokens();
  } else {
    Tensor c = borrow(coords, "coords");
    s3d::check_tensor(c, "coords", DType::I32, {-1, 4});
    tokens = c.size(0);
  }
  S3D_CHECK(tokens <= INT32_MAX, "the request has ", tokens, " tokens; at most ", INT32_MAX,
            " are supported (the layouts hold token offsets as int32)");
  return tokens;
}

// The request's coordinates: the caller's (token layout), or for a grid-layout model without
// them (volume layout) the whole grid of each asset.
Tensor request_coords(const TensorView& view, int batch, const s3d::model::Transformer& m) {
  if (!absent(view)) return host_coords(view);
  require_coords(m);
  return s3d::model::grid_coords(batch, m.config().resolution);
}

// The volume shape [B, channels, R, R, R] of a grid-layout model.
s3d::Shape volume_shape(int batch, int channels, const s3d::model::ModelConfig& cfg) {
  return {batch, channels, cfg.resolution, cfg.resolution, cfg.resolution};
}

// A volume [B, C, R, R, R] (f32, any device) as tokens [B R^3, C] on the same device.
Tensor to_tokens(const Tensor& volume) {
  const int64_t C = volume.size(1);
  Tensor tokens = Tensor::empty({volume.numel() / C, C}, DType::F32, volume.device());
  s3d::kernels::volume_to_tokens(volume, tokens);
  return tokens;
}

// Tokens [B R^3, C] as a volume [B, C, R, R, R] on the same device, complete when this
// returns: the result goes to a caller (a step callback, a returned Array) that may read it
// from any stream, and the engine's stream does not block the legacy one.
Tensor to_volume(const Tensor& tokens, int batch, const s3d::model::ModelConfig& cfg) {
  Tensor volume = Tensor::empty(volume_shape(batch, static_cast<int>(tokens.size(1)), cfg),
                                DType::F32, tokens.device());
  s3d::kernels::tokens_to_volume(tokens, volume);
  if (volume.is_cuda()) s3d::synchronize();
  return volume;
}

// The engine's noise for `seed` (docs/FORMATS.md) as tokens [T, out] on the host. A grid-layout
// model's stream fills the volume [B, out, R, R, R] in row-major order, the order the
// original fills its noise, whichever layout the request uses.
Tensor seeded_noise(uint64_t seed, int batch, int64_t tokens, const s3d::model::Transformer& m,
                    Array& keep) {
  const s3d::model::ModelConfig& cfg = m.config();
  if (!grid_layout(m)) {
    keep = draw_noise(seed, tokens, cfg.out_channels);
    return borrow(keep.view, "noise");
  }
  Array drawn = draw_noise(seed, int64_t(batch) * cfg.out_channels, cfg.grid_tokens());
  Tensor volume = borrow(drawn.view, "noise").reshape(volume_shape(batch, cfg.out_channels, cfg));
  Tensor t = to_tokens(volume);
  keep = array_of(t);
  return t;
}

s3d::sampler::SamplerOptions sampler_options(const SamplerSettings& s, const FlagSet& flags) {
  s3d::sampler::SamplerOptions o(s, flags);
  o.validate();
  return o;
}

// The flags a request falls back to when memory is short (Impl::fit_to_memory): without the
// condition K/V cache and batched CFG. A request refused under these is refused whatever it
// asked for, so the check can run before anything else.
FlagSet least_memory(FlagSet flags) {
  flags.set(Flag::cond_kv_cache, false);
  flags.set(Flag::batched_cfg, false);
  return flags;
}

// Throws unless the caller's `out` is f32 of `shape` (checked before the request runs, not
// when the result is copied into it).
void check_out(const TensorView& out, const s3d::Shape& shape) {
  if (out.empty()) return;
  const Tensor o = borrow(out, "out");
  S3D_CHECK(o.dtype() == DType::F32 && o.shape() == shape, "out must be f32",
            s3d::shape_str(shape), ", got ", out.describe());
}

s3d::profiler::Mode profiler_mode(Profile p) {
  switch (p) {
    case Profile::Library: return s3d::profiler::Mode::Library;
    case Profile::Launches: return s3d::profiler::Mode::Launches;
    case Profile::Off: break;
  }
  return s3d::profiler::Mode::Off;
}

// The first `tokens` voxels of the grid in raster order: a valid layout of any size up to
// the grid's, for warm-up requests.
Tensor raster_coords(int64_t tokens, int grid) {
  const int64_t cells = int64_t(grid) * grid * grid;
  S3D_CHECK(tokens >= 1 && tokens <= cells, "warm_up: token count ", tokens,
            " must be in [1, ", cells, "] (the ", grid, "^3 grid)");
  Tensor c = Tensor::empty({tokens, 4}, DType::I32, Device::CPU);
  int32_t* p = c.data_as<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    p[4 * t] = 0;
    p[4 * t + 1] = static_cast<int32_t>(t / (int64_t(grid) * grid));
    p[4 * t + 2] = static_cast<int32_t>((t / grid) % grid);
    p[4 * t + 3] = static_cast<int32_t>(t % grid);
  }
  return c;
}

ExecutionPlan plan_with(const ExecutionPlan& base, const FlagSet& flags) {
  ExecutionPlan p = base;
  for (const FlagInfo& f : flag_infos()) p.set(f.flag, flags.on(f.flag));
  return p;
}

// Per op: the launches between two snapshots of the counters (ops with none left out).
std::map<std::string, uint64_t> launch_delta(const s3d::LaunchCounts& before,
                                             const s3d::LaunchCounts& after) {
  std::map<std::string, uint64_t> d;
  for (const auto& [op, n] : after.by_op) {
    auto b = before.by_op.find(op);
    const uint64_t k = n - (b == before.by_op.end() ? 0 : b->second);
    if (k) d[op] = k;
  }
  return d;
}

void fill_stats(const s3d::sampler::Output& out, const s3d::LaunchCounts& before,
                RequestStats& st) {
  const s3d::LaunchCounts after = s3d::launch_counts();
  st.setup_seconds = out.setup_seconds;
  st.loop_seconds = out.loop_seconds;
  st.launches = after.total - before.total;
  st.launches_before_loop = out.launches_before_loop.total - before.total;
  st.launches_by_op = launch_delta(before, after);
  st.launches_before_loop_by_op = launch_delta(before, out.launches_before_loop);
  st.graphs_captured = out.graphs_captured;
  st.graph_capture_seconds = out.graph_capture_seconds;
  st.graph_nodes = out.graph_nodes;
}

}  // namespace

StreamScope::StreamScope(s3d::Context& context, void* stream, cudaStream_t own)
    : context_(context), previous_(context.stream()) {
  if (context.device() < 0) return;
  auto caller = static_cast<cudaStream_t>(stream);
  if (caller == cudaStreamLegacy || caller == cudaStreamPerThread) {
    S3D_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    S3D_CUDA_CHECK(cudaEventRecord(event_, caller));
    S3D_CUDA_CHECK(cudaStreamWaitEvent(own, event_, 0));
    join_ = caller;
    own_ = own;
    caller = own;
  }
  context.set_stream(caller ? caller : own);
}

StreamScope::~StreamScope() {
  if (event_) {
    // Best effort in a destructor: a failure here leaves the caller to synchronise.
    if (cudaEventRecord(event_, own_) == cudaSuccess) cudaStreamWaitEvent(join_, event_, 0);
    cudaEventDestroy(event_);
  }
  context_.set_stream(previous_);
}

FlagSet Engine::Impl::flags_for(const std::optional<FlagSet>& requested) const {
  return requested ? *requested : plan.flags();
}

size_t Engine::Impl::memory_need(int64_t tokens, int batch, int cond_tokens,
                                 const FlagSet& flags) const {
  const bool batched = flags.on(Flag::batched_cfg);
  const int64_t t_eff = batched ? 2 * tokens : tokens;
  const int b_eff = batched ? 2 * batch : batch;
  // Callers bound tokens and B L by int32 (the layouts' offsets), so that the estimate's
  // products stay far inside size_t; anything past that needs more than any machine has.
  if (tokens > INT32_MAX || batch > INT32_MAX / 2 || int64_t(batch) * cond_tokens > INT32_MAX)
    return SIZE_MAX;
  size_t need = model->activation_bytes(t_eff, b_eff, cond_tokens, flags);
  if (flags.on(Flag::cond_kv_cache)) {
    // Per block: K and V [BL, 2C] bf16 (with K RMSNorm the normalised K and V alone), for
    // every condition cached (StepForwards::set_up_kv_cache): the B real ones, plus with
    // batched CFG and no null-context path the batched reference's [real; zero] 2B.
    const auto& c = model->config();
    const bool null_path = flags.on(Flag::null_context_exact) || flags.on(Flag::null_context_cache);
    const size_t assets = static_cast<size_t>(batched && !null_path ? 3 * batch : batch);
    need += static_cast<size_t>(c.num_blocks) * assets * cond_tokens * 2 * c.model_channels * 2;
  }
  return need;
}

size_t Engine::Impl::memory_available() const {
  if (device != Device::CUDA) {
    // The CPU backend's activations are host memory: what the system has available (unknown:
    // no bound but the cap), under max_device_memory_gib when set.
    size_t available = s3d::host_memory_available().value_or(SIZE_MAX);
    if (options.max_device_memory_gib > 0)
      available = std::min(
          available, static_cast<size_t>(options.max_device_memory_gib * 1024 * 1024 * 1024));
    return available;
  }
  size_t free_b = 0, total_b = 0;
  S3D_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Blocks the caching allocator holds count as free for this purpose.
  const s3d::AllocatorStats st = s3d::DeviceAllocator::current().stats();
  size_t available = free_b + (st.reserved_bytes - st.allocated_bytes);
  if (options.max_device_memory_gib > 0) {
    const auto cap = static_cast<size_t>(options.max_device_memory_gib * 1024 * 1024 * 1024);
    available = std::min(available, cap > st.allocated_bytes ? cap - st.allocated_bytes : 0);
  }
  return available;
}

FlagSet Engine::Impl::fit_to_memory(int64_t tokens, int batch, int cond_tokens,
                                    FlagSet flags) const {
  const size_t device_available = memory_available();
  // Under fit_to_reference, what the original PyTorch module would allocate for the request.
  const size_t reference =
      options.fit_to_reference ? model->reference_activation_bytes(tokens, batch, cond_tokens)
                               : SIZE_MAX;
  const size_t available = std::min(device_available, reference);
  const bool by_reference = reference < device_available;
  for (const Flag f : {Flag::cond_kv_cache, Flag::batched_cfg}) {
    const size_t need = memory_need(tokens, batch, cond_tokens, flags);
    if (need <= available || !flags.on(f)) continue;
    FlagSet without = flags;
    without.set(f, false);
    s3d::record_fallback(
        f, s3d::cat("the request would need an estimated ", gib(need), " GiB of activations with ",
                    sparse3d::name(f), ", ", gib(memory_need(tokens, batch, cond_tokens, without)),
                    " GiB without; ", gib(available),
                    by_reference ? " GiB are what the original PyTorch module would allocate "
                                   "for it (fit_to_reference)"
                                 : " GiB available",
                    !by_reference && options.max_device_memory_gib > 0
                        ? " under max_device_memory_gib" : "",
                    ": off for this request"));
    flags = without;
  }
  return flags;
}

void Engine::Impl::check_memory(int64_t tokens, int batch, int cond_tokens,
                                const FlagSet& flags) const {
  const bool batched = flags.on(Flag::batched_cfg);
  const int64_t t_eff = batched ? 2 * tokens : tokens;
  const size_t need = memory_need(tokens, batch, cond_tokens, flags);
  const size_t available = memory_available();
  // On the CPU backend the same estimate is held against host memory: a request that cannot
  // fit is refused here rather than after minutes of allocating (or by the system's OOM killer).
  S3D_CHECK(need <= available, t_eff, " tokens", batched ? " (both CFG branches batched)" : "",
            " with ", int64_t(batch) * cond_tokens, " condition tokens need an estimated ",
            gib(need), " GiB of ", device == Device::CUDA ? "device" : "host",
            " memory for activations, but only ", gib(available), " GiB are available",
            options.max_device_memory_gib > 0 ? " under max_device_memory_gib" : "",
            " (weights hold ", gib(model->weight_bytes()), " GiB); use fewer tokens",
            batched ? " or serial CFG" : "",
            flags.on(Flag::chunked_mlp) ? "" : " or the low_memory path", " (nothing was run)");
  // The CPU backend is the reference oracle, not a product path: its attention is a plain
  // loop, quadratic in the tokens, so a request that fits in memory could still run for
  // hours without a way to stop it from Python. Past kCpuMaxTokens it is refused up front.
  S3D_CHECK(device == Device::CUDA || tokens <= kCpuMaxTokens, tokens,
            " tokens in one request on the CPU backend: it takes at most ", kCpuMaxTokens,
            " (the CPU backend is the reference, with quadratic-time attention; run this on a "
            "GPU) (nothing was run)");
}

s3d::ops::OpPlan Engine::Impl::null_context_plan(bool tuned_gemm) {
  FlagSet f;
  if (tuned_gemm) f.set(Flag::tuned_gemm);
  return s3d::ops::OpPlan::resolve(f, &cache);
}

const s3d::model::NullContext& Engine::Impl::null_context(int cond_tokens, int64_t tokens,
                                                          bool tuned_gemm, bool batched,
                                                          bool want_cache) {
  auto& nc = null_contexts[{cond_tokens, tuned_gemm}];
  // The cache's weights identity carries the plan policy too (docs/FORMATS.md).
  const std::string weights = info.content_hash + (tuned_gemm ? "+tuned_gemm" : "");
  if (!nc) {
    const auto t0 = std::chrono::steady_clock::now();
    s3d::model::NullContextOptions o;
    o.context_tokens = cond_tokens;
    o.qualification.ops = null_context_plan(tuned_gemm);
    const s3d::contract::Fingerprint& fp = s3d::contract::context_fingerprint();
    const std::optional<s3d::model::Applicability> known =
        cache.find_probe(fp, weights, o, model->config());
    if (known) o.trusted = &*known;
    nc = std::make_unique<s3d::model::NullContext>(s3d::model::NullContext::build(*model, o));
    if (!known) cache.store_probe(fp, weights, o, nc->applicability());
    log(s3d::cat(nc->report(), "  (", known ? "verdict from the cache" : "probed", ", ",
                 seconds_since(t0), " s)"));
  }
  // Serial CFG on the exact path changes no GEMM shape: the probe is the whole check.
  if (!nc->applicability().ok || (!want_cache && !batched)) return *nc;
  const auto& done = nc->qualifications();
  const auto have = done.find({tokens, batched});
  if (have != done.end() && (have->second.rows_checked || !want_cache)) return *nc;
  // Qualified on the device for this request's N and CFG mode alone (docs/CONTRACTS.md,
  // "What the bits depend on"): a few GEMMs per block and one small copy of the verdicts.
  s3d::model::QualificationOptions shapes;
  shapes.ops = null_context_plan(tuned_gemm);
  if (!options.qualify_m.empty()) shapes.candidate_m = options.qualify_m;
  shapes.token_counts = {tokens};
  shapes.serial = !batched;
  shapes.batched = batched;
  // The to_kv slice depends on L alone: checked with the first batched qualification of L.
  const std::string* kv = nc->kv_slice(cond_tokens);
  if (batched && kv == nullptr) shapes.context_rows = {cond_tokens};
  else shapes.context_rows = {};
  const auto t0 = std::chrono::steady_clock::now();
  if (want_cache) shapes.candidates = &nc->candidates(*model, shapes);
  s3d::model::Qualification q =
      s3d::model::qualify_null_context(*model, nc->value_rows(), shapes, want_cache, batched);
  shapes.candidates = nullptr;
  q.options.context_rows = {cond_tokens};
  if (q.kv_checked) {
    nc->set_kv_slice(cond_tokens, q.kv_failure);
  } else if (batched && !kv->empty()) {
    if (q.slices_ok) q.slice_failure = *kv;
    q.slices_ok = false;
  }
  ++qualifications_run;
  log(s3d::cat("null context L=", cond_tokens, " N=", tokens, batched ? " batched" : " serial",
               " CFG", tuned_gemm ? " (searched GEMM plans)" : "", ": ",
               want_cache ? q.summary() : std::string("slices"),
               q.slices_checked ? (q.slices_ok ? ", slices bitwise" : ", slices differ") : "",
               " (qualified on the device, ", seconds_since(t0), " s)"));
  nc->add_qualification(tokens, batched, std::move(q));
  return *nc;
}

// A sample request's inputs, checked (Impl::check_sample): its views read as tensors, and
// nothing drawn, probed or allocated on its behalf yet.
struct Engine::Impl::SampleInputs {
  // Volume layout (a grid-layout model without coords): noise, latent, `out` and the step
  // latents are [B, out, R, R, R]; the loop itself runs on tokens.
  bool volume = false;
  int64_t tokens = 0;       // T
  int cond_tokens = 0;      // L
  FlagSet requested;        // the request's flags, before fit_to_memory
  s3d::sampler::Inputs in;  // all but the noise, which sample() sets
  Tensor noise;             // the caller's noise in the request's layout, or undefined
};

namespace {

// SampleRequest::on_step as the sampler's callback (none when the request has none): each
// step's latent in the request's layout.
s3d::sampler::StepCallback step_callback(const SampleRequest& r, bool volume,
                                         const s3d::model::ModelConfig& cfg) {
  if (!r.on_step) return {};
  return [&r, volume, &cfg](const s3d::sampler::StepRecord& rec, const Tensor& x) {
    const Array latent = array_of(volume ? to_volume(x, r.batch, cfg) : x);
    r.on_step(StepInfo{rec.index, rec.total, rec.t, rec.t_prev, rec.cfg, rec.elapsed_s,
                       latent.view});
  };
}

// The sampler's latents in the request's layout: the final one into the caller's `out` when
// given (else a new Array), and the first forward's velocities when kept.
void return_latents(const s3d::sampler::Output& out, const SampleRequest& r, bool volume,
                    const s3d::model::ModelConfig& cfg, SampleResult& result) {
  const auto layout = [&](const Tensor& tokens) {
    return volume ? to_volume(tokens, r.batch, cfg) : tokens;
  };
  if (!r.out.empty()) {
    copy_into_view(layout(out.latent), r.out, "out");
    result.latent.view = r.out;
  } else {
    result.latent = array_of(layout(out.latent));
  }
  if (out.first_v_cond.defined()) result.first_v_cond = array_of(layout(out.first_v_cond));
  if (out.first_v_uncond.defined()) result.first_v_uncond = array_of(layout(out.first_v_uncond));
}

// A request's tensor as the forward takes it: on `device` in `dtype`, copied as it is when the
// dtypes match, else moved to the device and cast there.
Tensor on_device_as(const Tensor& in, DType dtype, Device device) {
  Tensor out = Tensor::empty(in.shape(), dtype, device);
  if (in.dtype() == dtype) {
    out.copy_from(in);
  } else {
    s3d::kernels::cast(in.to(device), out);
  }
  return out;
}

// A forward's RequestStats: its op profile, plan and tokens, the time and the launches since
// `started` and `before`, and on CUDA the allocator's peaks.
void fill_forward_stats(RequestStats& st,
                        const std::map<std::string, s3d::profiler::OpTotals>& totals,
                        const ExecutionPlan& plan, const FlagSet& flags, int64_t tokens,
                        std::chrono::steady_clock::time_point started,
                        const s3d::LaunchCounts& before, Device device) {
  st = RequestStats{};
  for (const auto& [name, op] : totals) st.profile[name] = OpTime{op.calls, op.seconds, op.flops};
  st.plan = plan_with(plan, flags).label();
  st.tokens = tokens;
  st.loop_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const s3d::LaunchCounts after = s3d::launch_counts();
  st.launches = after.total - before.total;
  st.launches_by_op = launch_delta(before, after);
  if (device == Device::CUDA) {
    const s3d::AllocatorStats mem = s3d::DeviceAllocator::current().stats();
    st.peak_device_bytes = mem.peak_allocated_bytes;
    st.peak_device_reserved_bytes = mem.peak_reserved_bytes;
  }
}

}  // namespace

Engine::Impl::SampleInputs Engine::Impl::check_sample(const SampleRequest& r) const {
  const auto& cfg = model->config();
  // Every input is checked before any work on the request's behalf (the null-context probe
  // and qualification, a cache entry written, an allocation sized by the request): first the
  // settings and the shapes, then the memory the shapes need, then the values. A refused
  // request costs its checks alone.
  S3D_CHECK(r.batch >= 1, "batch must be >= 1, got ", r.batch);
  SampleInputs s;
  s.requested = flags_for(r.flags);
  sampler_options(r.sampler, s.requested);  // validates the settings
  s.volume = absent(r.coords) && grid_layout(*model);
  s.tokens = request_tokens(r.coords, r.batch, *model);
  const int64_t T = s.tokens;
  s3d::sampler::Inputs& in = s.in;
  in.batch = r.batch;
  in.cond = condition(r.cond, r.batch, cfg.cond_channels);
  s.cond_tokens = static_cast<int>(in.cond.size(1));
  const int L = s.cond_tokens;
  const s3d::Shape latent_shape = s.volume ? volume_shape(r.batch, cfg.out_channels, cfg)
                                           : s3d::Shape{T, cfg.out_channels};
  if (!r.noise.empty()) {
    s.noise = borrow(r.noise, "noise");
    S3D_CHECK(s.noise.dtype() == DType::F32 && s.noise.shape() == latent_shape,
              "noise must be f32", s3d::shape_str(latent_shape),
              s.volume ? s3d::cat(" (the volume of ", r.batch, " asset(s); no coords given)")
                       : "",
              ", got ", r.noise.describe());
  }
  Tensor concat;
  if (!r.concat_cond.empty()) concat = borrow(r.concat_cond, "concat_cond");
  check_out(r.out, latent_shape);
  check_memory(T, r.batch, L, least_memory(s.requested));
  in.coords = request_coords(r.coords, r.batch, *model);
  model->check_request(in.coords, r.batch, L, concat);
  check_finite(in.cond, "cond");
  check_finite(concat, "concat_cond");
  check_finite(s.noise, "noise");
  in.concat_cond = concat;
  return s;
}

double Engine::Impl::use_null_context(s3d::sampler::SamplerOptions& o, const FlagSet& flags,
                                      int cond_tokens, int64_t tokens) {
  // The null context serves only steps that run the unconditional branch: a request without
  // one (guidance 1 on every step, as TRELLIS.2's texture stage) neither probes nor
  // qualifies anything, and its null flags change nothing.
  const bool null_flags = flags.on(Flag::null_context_exact) || flags.on(Flag::null_context_cache);
  if (null_flags && !s3d::sampler::runs_unconditional(s3d::sampler::plan_steps(o))) {
    o.flags.set(Flag::null_context_exact, false);
    o.flags.set(Flag::null_context_cache, false);
  } else if (null_flags) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t probed = null_contexts.size();
    const uint64_t qualified = qualifications_run;
    o.null_context = &null_context(cond_tokens, tokens,
                                   flags.on(Flag::tuned_gemm) && device == Device::CUDA,
                                   flags.on(Flag::batched_cfg), flags.on(Flag::null_context_cache));
    if (null_contexts.size() != probed || qualifications_run != qualified)
      return seconds_since(t0);
  }
  return 0;
}

s3d::sampler::Output Engine::Impl::run_sampler(const SampleRequest& r, const SampleInputs& s,
                                               const s3d::sampler::SamplerOptions& o,
                                               const FlagSet& flags, SampleResult& result) {
  if (device == Device::CUDA) s3d::DeviceAllocator::current().reset_peak();
  const s3d::LaunchCounts before = s3d::launch_counts();
  s3d::profiler::start(profiler_mode(r.profile));
  const s3d::sampler::StepCallback on_step = step_callback(r, s.volume, model->config());
  s3d::sampler::Output out;
  try {
    out = s3d::sampler::sample(*model, s.in, o, r.keep_first_forward, on_step);
  } catch (...) {  // an interrupted request (SampleRequest::stop) leaves no profiler running
    s3d::profiler::stop_and_collect();
    throw;
  }
  for (const auto& rec : out.steps)
    result.steps.push_back(
        StepInfo{rec.index, rec.total, rec.t, rec.t_prev, rec.cfg, rec.elapsed_s, {}});
  for (const auto& [name, t] : s3d::profiler::stop_and_collect())
    result.stats.profile[name] = OpTime{t.calls, t.seconds, t.flops};
  fill_stats(out, before, result.stats);
  result.stats.plan = plan_with(plan, flags).label();
  result.stats.tokens = s.tokens;
  if (device == Device::CUDA) {
    const s3d::AllocatorStats mem = s3d::DeviceAllocator::current().stats();
    result.stats.peak_device_bytes = mem.peak_allocated_bytes;
    result.stats.peak_device_reserved_bytes = mem.peak_reserved_bytes;
    peak_device_bytes = std::max(peak_device_bytes, result.stats.peak_device_bytes);
  }
  return out;
}

SampleResult Engine::Impl::sample(const SampleRequest& r) {
  const auto call_start = std::chrono::steady_clock::now();
  s3d::ContextScope scope(*context);
  StreamScope stream(*context, r.cuda_stream, own_stream);
  const auto first_use_before = s3d::first_use_totals();
  SampleInputs s = check_sample(r);  // every check, before any work
  const int64_t T = s.tokens;
  const int L = s.cond_tokens;

  Array drawn;  // the seed's noise, alive for the whole request
  if (s.noise.defined()) {
    s.in.noise = s.volume ? to_tokens(s.noise) : s.noise;
  } else {
    s.in.noise = seeded_noise(r.seed, r.batch, T, *model, drawn);
  }
  const FlagSet flags = fit_to_memory(T, r.batch, L, s.requested);
  s3d::sampler::SamplerOptions o = sampler_options(r.sampler, flags);
  // Searched cuBLASLt/cuDNN plans for this request's shapes (the `linear` and `sdpa` ops'
  // candidates) are kept in the qualification cache.
  o.plan_store = &cache;
  check_memory(T, r.batch, L, flags);
  const double null_context_seconds = use_null_context(o, flags, L, T);
  SampleResult result;
  o.parallel = split_for(T, result.stats);
  const bool one_device = !o.parallel || o.parallel->parts() <= 1;
  if (one_device) o.stop = r.stop, o.progress = r.on_progress;
  const s3d::sampler::Output out = run_sampler(r, s, o, flags, result);
  if (!one_device && r.on_progress) r.on_progress(o.steps, o.steps);
  if (o.parallel) gather_rank_fallbacks();
  return_latents(out, r, s.volume, model->config(), result);
  ++requests;
  result.stats.null_context_seconds = null_context_seconds;
  for (const auto& [kind, c] : s3d::first_use_delta(first_use_before, s3d::first_use_totals()))
    result.stats.first_use[kind] = FirstUseCost{c.count, c.seconds};
  result.stats.wall_seconds = seconds_since(call_start);
  return result;
}

Array Engine::Impl::forward(const ForwardRequest& r) {
  s3d::ContextScope scope(*context);
  StreamScope stream(*context, r.cuda_stream, own_stream);
  const auto& cfg = model->config();
  // As sample(): the shapes, then the memory they need, then the values, before any work.
  S3D_CHECK(r.batch >= 1, "batch must be >= 1, got ", r.batch);
  const bool volume = absent(r.coords) && grid_layout(*model);
  const int64_t T = request_tokens(r.coords, r.batch, *model);
  Tensor cond_in = condition(r.cond, r.batch, cfg.cond_channels);
  const int L = static_cast<int>(cond_in.size(1));
  Tensor x_in = borrow(r.x, "x");
  const s3d::Shape x_shape =
      volume ? volume_shape(r.batch, cfg.out_channels, cfg) : s3d::Shape{T, cfg.out_channels};
  S3D_CHECK(x_in.shape() == x_shape && (x_in.dtype() == DType::F32 || x_in.dtype() == DType::BF16),
            "x must be f32 or bf16", s3d::shape_str(x_shape),
            volume ? " (the volume; no coords given)" : "", ", got ", r.x.describe());
  Tensor t_in = borrow(r.t, "t");
  s3d::check_tensor(t_in, "t", DType::F32, {r.batch});
  Tensor concat_view;
  if (!r.concat_cond.empty()) concat_view = borrow(r.concat_cond, "concat_cond");
  check_out(r.out, x_shape);
  const FlagSet flags = flags_for(r.flags);
  FlagSet one_forward = flags;  // a forward is one batch, whatever the CFG mode
  one_forward.set(Flag::batched_cfg, false);
  check_memory(T, r.batch, L, one_forward);
  Tensor coords = request_coords(r.coords, r.batch, *model);
  model->check_request(coords, r.batch, L, concat_view);
  check_finite(cond_in, "cond");
  check_finite(x_in, "x");
  check_finite(t_in, "t");
  check_finite(concat_view, "concat_cond");

  Tensor concat;
  if (concat_view.defined()) concat = concat_view.to(Device::CPU);
  if (device == Device::CUDA) s3d::DeviceAllocator::current().reset_peak();
  s3d::model::Request req = model->prepare(coords, r.batch, L, concat);
  req.use_flags(flags, &cache);
  Tensor x = on_device_as(x_in, DType::F32, device);  // x_in's shape is x_shape, checked above
  if (volume) x = to_tokens(x);
  Tensor cond = on_device_as(cond_in, DType::BF16, device);
  Tensor t = t_in.to(device);
  // Stats and profile cover the forward itself, not the request's set-up above.
  if (device == Device::CUDA) s3d::synchronize();
  const s3d::LaunchCounts before = s3d::launch_counts();
  const auto started = std::chrono::steady_clock::now();
  s3d::profiler::start(profiler_mode(r.profile));
  Tensor v = model->forward(req, x, t, cond);
  if (volume) v = to_volume(v, r.batch, cfg);
  ++requests;
  if (device == Device::CUDA) s3d::synchronize();
  const auto totals = s3d::profiler::stop_and_collect();
  if (r.stats) fill_forward_stats(*r.stats, totals, plan, flags, T, started, before, device);
  if (r.out.empty()) return array_of(v);
  copy_into_view(v, r.out, "out");
  Array a;
  a.view = r.out;
  return a;
}

void Engine::Impl::warm_up(const std::vector<int64_t>& token_counts, int cond_tokens) {
  S3D_CHECK(cond_tokens >= 1, "warm_up: cond_tokens must be >= 1, got ", cond_tokens);
  const auto& cfg = model->config();
  // Each count's batch: a grid-layout model's requests are whole grids, so n tokens are n / R^3
  // assets; the others warm one asset of the first n voxels of the grid.
  const auto batch_of = [&](int64_t n) {
    if (!grid_layout(*model)) {
      const int64_t cells = int64_t(cfg.resolution) * cfg.resolution * cfg.resolution;
      S3D_CHECK(n >= 1 && n <= cells, "warm_up: token count ", n, " must be in [1, ", cells,
                "] (the ", cfg.resolution, "^3 grid)");
      return 1;
    }
    S3D_CHECK(n >= 1 && n % cfg.grid_tokens() == 0 && n <= INT32_MAX, "warm_up: a ", cfg.family,
              "'s token counts are whole ", cfg.resolution, "^3 grids (multiples of ",
              cfg.grid_tokens(), ", at most ", INT32_MAX, "), got ", n);
    return static_cast<int>(n / cfg.grid_tokens());
  };
  // Every count is checked, its memory too, before the first is warmed: a list with one bad
  // count does no work.
  for (int64_t n : token_counts) {
    const int batch = batch_of(n);
    S3D_CHECK(cond_tokens <= INT32_MAX / batch, "warm_up: cond_tokens ", cond_tokens,
              " x ", batch, " assets is more than the ", INT32_MAX, " condition tokens a "
              "request may have");
    check_memory(n, batch, cond_tokens, least_memory(plan.flags()));
  }
  for (int64_t n : token_counts) {
    const int batch = batch_of(n);
    const Tensor coords = grid_layout(*model) ? s3d::model::grid_coords(batch, cfg.resolution)
                                      : raster_coords(n, cfg.resolution);
    Array cond = draw_noise(0x3a3a, int64_t(batch) * cond_tokens, cfg.cond_channels);
    SampleRequest r;
    r.coords = array_of(coords).view;
    r.batch = batch;
    r.cond = cond.view;
    r.cond.shape = {batch, cond_tokens, cfg.cond_channels};
    Tensor concat;  // texture models: the shape latent's channels, zeros
    if (cfg.in_channels > cfg.out_channels) {
      concat = Tensor::zeros({coords.size(0), cfg.in_channels - cfg.out_channels}, DType::F32,
                             Device::CPU);
      r.concat_cond = array_of(concat).view;
    }
    r.seed = 1;
    // Two steps: one with both CFG branches, one conditional only (interval [0.9, 1]).
    r.sampler = SamplerSettings{2, 3.0, 7.5, 0.9, 1.0, 0.5, 1e-5};
    sample(r);
  }
}

}  // namespace sparse3d
