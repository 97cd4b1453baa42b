// Engine: load, counters, fingerprint, qualification state (include/sparse3d/engine.h).
// Requests are in requests.cpp.
#include <chrono>
#include <cstdio>
#include <thread>

#include "contract/fallback.h"
#include "contract/fingerprint.h"
#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/hash.h"
#include "engine/engine_impl.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/trunk/transformer.h"
#include "model/trunk/weights.h"

namespace sparse3d {
namespace {

// The CPU backend is a correctness oracle, not a product path: beyond this size a request
// would take hours, so such a model is refused with a pointer to what works.
constexpr int64_t kCpuParameterLimit = 50'000'000;

Device choose_device(DeviceChoice wanted) {
  const bool gpu = s3d::cuda_available();
  S3D_CHECK(wanted != DeviceChoice::CUDA || gpu, "device cuda: no usable CUDA device found");
  if (wanted == DeviceChoice::CPU) return Device::CPU;
  return gpu ? Device::CUDA : Device::CPU;
}

ExecutionPlan plan_of(const EngineOptions& o, Device device) {
  ExecutionPlan plan = ExecutionPlan::parse(o.path.empty() ? default_path() : o.path);
  if (o.path.empty() && device == Device::CPU) plan.disable(Flag::cuda_graphs);
  for (Flag f : o.enable) plan.enable(f);
  for (Flag f : o.disable) plan.disable(f);
  return plan;
}

FamilyInfo family_info(const s3d::model::Family& f) {
  return FamilyInfo{f.name(), s3d::model::layout_name(f.layout()), f.sampler_preset(),
                    f.reads_rope_freq()};
}

ModelInfo model_info(const s3d::model::Transformer& m, const std::string& checkpoint) {
  const auto& c = m.config();
  ModelInfo i;
  i.family = m.summary().family;
  const FamilyInfo f = family_info(m.family());
  i.layout = f.layout;
  i.sampler_preset = f.sampler_preset;
  i.checkpoint = checkpoint;
  i.content_hash = s3d::hex16(m.weights_version());
  i.weight_format = std::string(m.weight_format().name);
  i.resolution = c.resolution;
  i.in_channels = c.in_channels;
  i.out_channels = c.out_channels;
  i.model_channels = c.model_channels;
  i.cond_channels = c.cond_channels;
  i.num_blocks = c.num_blocks;
  i.num_heads = c.num_heads;
  i.mlp_hidden = static_cast<int>(c.mlp_hidden());
  i.parameters = s3d::model::parameter_count(c);
  return i;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Reads the checkpoint on the host while another thread starts CUDA on `device_index`.
s3d::model::Checkpoint read_while_cuda_starts(const std::function<s3d::model::Checkpoint()>& read,
                                              Device device, int device_index) {
  cudaError_t started = cudaSuccess;
  std::thread cuda;
  if (device == Device::CUDA)
    cuda = std::thread([&] {
      started = cudaSetDevice(device_index);
      if (started == cudaSuccess) started = cudaFree(nullptr);  // creates the context
    });
  s3d::model::Checkpoint host;
  try {
    host = read();
  } catch (...) {
    if (cuda.joinable()) cuda.join();
    throw;
  }
  if (cuda.joinable()) cuda.join();
  S3D_CUDA_CHECK(started);
  return host;
}

}  // namespace

std::vector<FamilyInfo> model_families() {
  std::vector<FamilyInfo> out;
  for (const s3d::model::Family* f : s3d::model::families()) out.push_back(family_info(*f));
  return out;
}

Engine::Impl::Impl(const std::string& checkpoint,
                   const std::function<s3d::model::Checkpoint()>& read, EngineOptions opts)
    : options(std::move(opts)),
      device(choose_device(options.device)),
      plan(plan_of(options, device)),
      cache(options.persist_qualification
                ? (options.cache_dir.empty() ? s3d::engine::default_cache_dir() : options.cache_dir)
                : std::string(),
            options.log) {
  S3D_CHECK(options.max_device_memory_gib >= 0, "max_device_memory_gib must be >= 0, got ",
            options.max_device_memory_gib);
  for (int64_t m : options.qualify_m)
    S3D_CHECK(m >= 1 && m <= (1 << 20), "qualify_m: candidate M must be in [1, 1048576], got ", m);
  if (!options.devices.empty()) {
    S3D_CHECK(options.device_index == 0 || options.device_index == options.devices[0],
              "devices: the first listed device (", options.devices[0],
              ") is the engine's own; device_index (", options.device_index,
              ") must be 0 or the same");
    options.device_index = options.devices[0];
  }
  if (device == Device::CUDA) {
    int count = 0;
    S3D_CUDA_CHECK(cudaGetDeviceCount(&count));
    S3D_CHECK(options.device_index >= 0 && options.device_index < count, "device_index ",
              options.device_index, " is not a CUDA device (", count, " found)");
  }
  if (options.workspace) {
    S3D_CHECK(device == Device::CUDA, "workspace: a workspace is a GPU's; this engine runs on "
              "the CPU backend");
    S3D_CHECK(options.devices.size() <= 1, "workspace: not with devices (an engine over ",
              options.devices.size(), " GPUs); a workspace serves engines on one GPU");
    S3D_CHECK(options.workspace->device_index() == options.device_index, "workspace: it is "
              "cuda:", options.workspace->device_index(), "'s, the engine runs on cuda:",
              options.device_index);
    workspace = &options.workspace->impl();
  }
  const s3d::ops::WeightFormat& format = s3d::ops::find_weight_format(options.weight_format);
  // CUDA's start-up (the device's primary context) overlaps reading the checkpoint.
  const auto t0 = std::chrono::steady_clock::now();
  s3d::model::Checkpoint host = read_while_cuda_starts(read, device, options.device_index);
  s3d::model::apply_weight_format(host, format);
  const auto t1 = std::chrono::steady_clock::now();
  // The device work of the build runs while no request of an engine sharing the workspace
  // does (they share its allocator; a capture in flight must not see these allocations).
  WorkspaceHold hold(workspace, "Engine (construction)");
  context = std::make_unique<s3d::Context>(device == Device::CUDA ? options.device_index : -1,
                                           workspace ? workspace->allocator : nullptr);
  try {  // what is made from here on goes when construction fails (out of device memory)
    s3d::ContextScope scope(*context);
    if (device == Device::CUDA) {
      S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream, cudaStreamNonBlocking));
      context->set_stream(own_stream);
    }
    // The further devices' replicas (EngineOptions::devices) share the host copy's tensors.
    const s3d::model::Checkpoint host_for_ranks =
        options.devices.size() > 1 ? host : s3d::model::Checkpoint();
    model =
        std::make_unique<s3d::model::Transformer>(s3d::model::to_device(std::move(host), device));
    set_up_ranks(host_for_ranks);
    log(s3d::cat("checkpoint read and hashed in ", seconds(t1 - t0),
                 " s (CUDA starting meanwhile), on the ", device == Device::CUDA ? "GPU" : "CPU",
                 " in ", seconds(std::chrono::steady_clock::now() - t1), " s"));
    info = model_info(*model, checkpoint);
    if (device == Device::CUDA) s3d::synchronize();
  } catch (...) {
    release();
    throw;
  }
}

Engine::Impl::~Impl() { release(); }

void Engine::Impl::release() {
  if (!context) return;
  release_ranks();
  {
    s3d::ContextScope scope(*context);
    if (device == Device::CUDA) cudaStreamSynchronize(own_stream);
    null_contexts.clear();
    model.reset();
    // Results may outlive the engine (each keeps the allocator alive): what is cached goes
    // back to the driver now, and a result's memory when it is dropped, so that destroying
    // an engine frees its device memory (the Python drop-in's .cpu()).
    // A shared workspace's cache stays the workspace's (Workspace::release_cache).
    if (device == Device::CUDA && !workspace) {
      s3d::DeviceAllocator& allocator = s3d::DeviceAllocator::current();
      allocator.set_caching(false);
      allocator.empty_cache();
    }
  }
  context.reset();
  if (own_stream) cudaStreamDestroy(own_stream);
  own_stream = nullptr;
}

void Engine::Impl::log(const std::string& line) const {
  if (options.log) options.log(line);
}

EngineLock::EngineLock(EngineAccess::Impl& impl, const char* call, Access access) : impl_(impl) {
  // Only this thread stores its own id in `holder`, so equality means this thread holds
  // `mu` and is inside one of the request's callbacks.
  if (impl.holder.load() == std::this_thread::get_id()) {
    S3D_CHECK(access == Access::Read, call,
              "() called from inside a callback (a step callback or the log) of a request "
              "running on the same engine: it cannot run before that request returns; only "
              "counters(), fits(), qualification(), fingerprint() and residency() may be "
              "called there");
    return;
  }
  impl.mu.lock();
  impl.holder.store(std::this_thread::get_id());
  owns_ = true;
  if (access == Access::Write && impl.workspace) {
    try {
      workspace_.emplace(impl.workspace, call);
    } catch (...) {
      impl.holder.store(std::thread::id());
      impl.mu.unlock();
      owns_ = false;
      throw;
    }
  }
}

EngineLock::~EngineLock() {
  if (!owns_) return;
  workspace_.reset();  // first: its device work finished before another request may start
  impl_.holder.store(std::thread::id());
  impl_.mu.unlock();
}

namespace {

// The CPU backend's size limit, checked from the config before any tensor is read.
void check_cpu_size(const s3d::model::ModelConfig& cfg, const std::string& checkpoint,
                    DeviceChoice wanted) {
  const int64_t params = s3d::model::parameter_count(cfg);
  const bool cpu = wanted == DeviceChoice::CPU ||
                   (wanted == DeviceChoice::Auto && !s3d::cuda_available());
  S3D_CHECK(!cpu || params <= kCpuParameterLimit, "checkpoint ", checkpoint, " has ", params,
            " parameters: the CPU backend is a reference for small models (the tiny preset); "
            "run this checkpoint on a GPU");
}

// Empty when InMemoryCheckpoint::borrow can be honoured for `ck` under `o`; else why not.
std::string borrow_refusal(const InMemoryCheckpoint& ck, const EngineOptions& o) {
  if (o.devices.size() > 1) return "the engine splits requests over several devices";
  if (&s3d::ops::find_weight_format(o.weight_format) != &s3d::ops::plain_format())
    return s3d::cat("weight format ", o.weight_format, " converts the weights");
  const Device device = choose_device(o.device);
  bool host = false, gpu = false;
  std::vector<s3d::model::BorrowedTensor> tensors;
  for (const auto& [name, view] : ck.tensors) {
    if (view.dtype != DType::BF16 && view.dtype != DType::F32)
      return s3d::cat("tensor ", name, " is ", view.describe(), "; weights are bf16 or f32");
    if (view.device == Device::CUDA) {
      gpu = true;
      if (device != Device::CUDA || view.device_index != o.device_index)
        return s3d::cat("tensor ", name, " is ", view.describe(), ", not on the engine's device");
      if (reinterpret_cast<uintptr_t>(view.data) % 256 != 0)
        return s3d::cat("tensor ", name, " does not start at a 256-byte boundary");
    } else {
      host = true;
    }
    tensors.push_back({name, s3d::Tensor::borrow(view.data, view.shape, view.dtype, view.device)});
  }
  if (host && gpu) return "the tensors are partly on the host, partly on the GPU";
  std::string config_error;
  try {
    const auto cfg = s3d::model::config_from_json(
        s3d::io::parse_json(ck.config_json, "config of " + ck.name), "config of " + ck.name);
    return s3d::model::borrow_refusal(cfg, tensors);
  } catch (const std::exception&) {
    return "";  // the config's own error comes from the load, as without borrow
  }
}

}  // namespace

Engine::Engine(const std::string& checkpoint_json, EngineOptions options) {
  check_cpu_size(s3d::model::read_config_file(checkpoint_json), checkpoint_json, options.device);
  impl_ = std::make_unique<Impl>(
      checkpoint_json, [&] { return s3d::model::read_checkpoint(checkpoint_json); },
      std::move(options));
}

Engine::Engine(const InMemoryCheckpoint& checkpoint, EngineOptions options) {
  const std::string& what = checkpoint.name;
  check_cpu_size(s3d::model::config_from_json(
                     s3d::io::parse_json(checkpoint.config_json, "config of " + what),
                     "config of " + what),
                 what, options.device);
  if (checkpoint.borrow) {
    const std::string refusal = borrow_refusal(checkpoint, options);
    if (refusal.empty()) {
      std::vector<s3d::model::BorrowedTensor> tensors;
      for (const auto& [name, view] : checkpoint.tensors)
        tensors.push_back({name, s3d::Tensor::borrow(view.data, view.shape, view.dtype, view.device)});
      impl_ = std::make_unique<Impl>(
          what,
          [&] {
            return s3d::model::checkpoint_borrowed(checkpoint.config_json, what, tensors,
                                                   checkpoint.keep_alive);
          },
          std::move(options));
      return;
    }
    if (options.log) options.log(s3d::cat("weights: copied, not borrowed: ", refusal));
  }
  // Device tensors are copied to the host first: the checkpoint's conversion and hash run
  // there, as for a file.
  std::vector<std::vector<char>> copies;
  std::vector<s3d::model::TensorBytes> tensors;
  for (const auto& [name, view] : checkpoint.tensors) {
    S3D_CHECK(view.dtype == DType::BF16 || view.dtype == DType::F32, what, ": tensor ", name,
              " is ", view.describe(), "; weights must be bf16 or f32");
    const void* data = view.data;
    if (view.device == Device::CUDA && view.data != nullptr) {
      copies.emplace_back(view.nbytes());
      S3D_CUDA_CHECK(cudaMemcpy(copies.back().data(), view.data, view.nbytes(), cudaMemcpyDeviceToHost));
      data = copies.back().data();
    }
    tensors.push_back(s3d::model::TensorBytes{name, s3d::io::file_dtype(view.dtype), view.shape, data});
  }
  impl_ = std::make_unique<Impl>(
      what, [&] { return s3d::model::checkpoint_from_memory(checkpoint.config_json, what, tensors); },
      std::move(options));
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const ModelInfo& Engine::model() const { return impl_->info; }
Device Engine::device() const { return impl_->device; }
const ExecutionPlan& Engine::plan() const { return impl_->plan; }

SampleResult Engine::sample(const SampleRequest& request) {
  EngineLock lock(*impl_, "sample", Access::Write);
  impl_->reload();  // after offload(): the weights come back first (nothing when resident)
  return impl_->sample(request);
}

Array Engine::forward(const ForwardRequest& request) {
  EngineLock lock(*impl_, "forward", Access::Write);
  impl_->reload();
  return impl_->forward(request);
}

std::string Engine::fits(int64_t tokens, int batch, int cond_tokens, const FlagSet& flags) const {
  // Arguments that describe no request are errors, not a "does not fit" answer (an empty
  // answer would say such a request fits).
  S3D_CHECK(tokens >= 1, "fits: tokens must be >= 1, got ", tokens);
  S3D_CHECK(batch >= 1, "fits: batch must be >= 1, got ", batch);
  S3D_CHECK(cond_tokens >= 1, "fits: cond_tokens must be >= 1, got ", cond_tokens);
  S3D_CHECK(tokens >= batch, "fits: ", batch, " assets need at least one token each, got ",
            tokens, " tokens");
  EngineLock lock(*impl_, "fits", Access::Read);
  s3d::ContextScope scope(*impl_->context);
  try {
    impl_->check_memory(tokens, batch, cond_tokens, flags);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void Engine::warm_up(const std::vector<int64_t>& token_counts, int cond_tokens) {
  EngineLock lock(*impl_, "warm_up", Access::Write);
  impl_->reload();
  impl_->warm_up(token_counts, cond_tokens);
}

Counters Engine::counters() const {
  EngineLock lock(*impl_, "counters", Access::Read);
  s3d::ContextScope scope(*impl_->context);
  Counters c;
  c.requests = impl_->requests;
  c.launches = s3d::launch_counts().total;
  for (const auto& f : s3d::contract::fallback_counts())
    c.fallbacks.push_back(FallbackCount{f.optimization, f.reason, f.count});
  const s3d::AllocatorStats st = s3d::DeviceAllocator::current().stats();
  c.device_bytes_in_use = st.allocated_bytes;
  c.device_bytes_reserved = st.reserved_bytes;
  c.peak_device_bytes = std::max(impl_->peak_device_bytes, st.peak_allocated_bytes);
  c.qualifications_run = impl_->qualifications_run;
  c.qualification_cache_hits = impl_->cache.stats().hits;
  c.qualification_cache_refusals = impl_->cache.stats().refusals;
  return c;
}

void Engine::reset_counters() {
  EngineLock lock(*impl_, "reset_counters", Access::Write);
  s3d::ContextScope scope(*impl_->context);
  s3d::reset_launch_counts();
  s3d::contract::reset_fallbacks();
  s3d::DeviceAllocator::current().reset_peak();
  impl_->peak_device_bytes = 0;
}

std::vector<std::pair<std::string, std::string>> Engine::fingerprint() const {
  EngineLock lock(*impl_, "fingerprint", Access::Read);
  s3d::ContextScope scope(*impl_->context);
  std::vector<std::pair<std::string, std::string>> out;
  const s3d::io::Json j = s3d::contract::context_fingerprint().to_json();
  for (auto it = j.begin(); it != j.end(); ++it)
    out.emplace_back(it.key(), it.value().is_string() ? it.value().get<std::string>()
                                                      : it.value().dump());
  return out;
}

std::vector<QualificationState> Engine::qualification() const {
  EngineLock lock(*impl_, "qualification", Access::Read);
  std::vector<QualificationState> out;
  for (const auto& [key, nc] : impl_->null_contexts) {
    // Called from the log while a request builds this condition length's null context
    // (the qualification cache logs from inside that build): its slot is still empty.
    if (!nc) continue;
    const auto [L, tuned_gemm] = key;
    QualificationState s;
    s.context_tokens = L;
    s.tuned_gemm = tuned_gemm;
    s.applicable = nc->applicability().ok;
    s.reason = nc->applicability().reason;
    s.facts = nc->applicability().facts;
    for (const auto& [key, q] : nc->qualifications())
      s.shapes.push_back(QualificationState::Shape{key.first, key.second, q.m, "qualified",
                                                   q.rows_checked ? q.summary() : "slices only"});
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sparse3d
