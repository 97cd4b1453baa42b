// Engine::Impl's sequence parallelism (EngineOptions::devices; docs/API.md "Several GPUs"):
// the replicas on the further devices, the choice of P per request and its fallbacks, and the
// NCCL groups, made at the first request that splits over P devices.
#include <set>

#include "contract/fallback.h"
#include "core/cuda_util.h"
#include "core/fallback.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "parallel/shard_plan.h"

namespace sparse3d {
namespace {

constexpr const char* kOptimization = "sequence_parallel";

}  // namespace

void Engine::Impl::set_up_ranks(const s3d::model::Checkpoint& host) {
  const std::vector<int>& devices = options.devices;
  S3D_CHECK(options.parallel_min_tokens >= 1, "parallel_min_tokens must be >= 1, got ",
            options.parallel_min_tokens);
  std::set<int> seen;
  for (int d : devices) {
    S3D_CHECK(d >= 0, "devices: ", d, " is not a CUDA device ordinal");
    S3D_CHECK(seen.insert(d).second, "devices: device ", d, " is listed twice");
  }
  if (devices.size() <= 1) return;
  S3D_CHECK(device == Device::CUDA,
            "devices: splitting a request over several devices needs "
            "the GPU backend (this engine runs on the CPU)");
  int count = 0;
  S3D_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::string missing;
  int existing = 0;  // further devices that exist
  for (size_t i = 1; i < devices.size(); ++i) {
    if (devices[i] < count) {
      ++existing;
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(devices[i]);
    }
  }
  if (!missing.empty()) {
    ranks_missing = s3d::cat("device ", missing, " missing (this machine has ", count,
                             " CUDA device", count == 1 ? "" : "s", ")");
  }
  if (existing > 0) {
    const std::string nccl = s3d::parallel::nccl_version();
    if (nccl.rfind("none", 0) == 0) {
      ranks_missing += (ranks_missing.empty() ? "" : "; ") + std::string("NCCL: ") + nccl;
      log("sequence parallel: " + ranks_missing + "; requests run on one device");
      return;
    }
  }
  for (size_t i = 1; i < devices.size(); ++i) {
    if (devices[i] >= count) continue;
    // In `ranks` before anything is made, so that release_ranks() frees what was made when a
    // replica does not load.
    Rank& r = ranks.emplace_back();
    r.device = devices[i];
    r.context = std::make_unique<s3d::Context>(r.device);
    s3d::ContextScope scope(*r.context);
    S3D_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    r.context->set_stream(r.stream);
    r.model = std::make_unique<s3d::model::Transformer>(s3d::model::to_device(host, Device::CUDA));
    s3d::synchronize();
  }
  log(s3d::cat("sequence parallel: weights on ", 1 + ranks.size(), " devices",
               ranks_missing.empty() ? "" : " (" + ranks_missing + ")"));
}

const s3d::model::SequenceParallel* Engine::Impl::split_for(int64_t tokens, RequestStats& stats) {
  const int listed = std::max<int>(1, static_cast<int>(options.devices.size()));
  stats.devices = 1;
  stats.devices_reason = "one device";
  if (listed == 1) return nullptr;
  const int heads = model->config().num_heads;
  const int64_t min_tokens = options.parallel_min_tokens;
  const s3d::parallel::PartsChoice wanted =
      s3d::parallel::choose_parts(tokens, heads, listed, min_tokens);
  const s3d::parallel::PartsChoice chosen =
      s3d::parallel::choose_parts(tokens, heads, 1 + static_cast<int>(ranks.size()), min_tokens);
  if (wanted.heads_limited) s3d::record_fallback(kOptimization, wanted.reason);
  stats.devices = chosen.parts;
  stats.devices_reason = chosen.reason;
  if (chosen.parts < wanted.parts) {
    // Fewer than the request would get with every listed device: say which are missing.
    stats.devices_reason = s3d::cat(chosen.parts, " of ", listed, " devices (", ranks_missing, "; ",
                                    wanted.parts, " wanted)");
    s3d::record_fallback(kOptimization, s3d::cat(ranks_missing, ": the request runs on ",
                                                 chosen.parts, " of ", listed, " devices"));
  }
  if (chosen.parts == 1) return nullptr;
  Split& split = splits[chosen.parts];
  if (!split.forward) {
    std::vector<s3d::Context*> contexts{context.get()};
    std::vector<const s3d::model::Transformer*> replicas{model.get()};
    for (int r = 0; r + 1 < chosen.parts; ++r) {
      contexts.push_back(ranks[static_cast<size_t>(r)].context.get());
      replicas.push_back(ranks[static_cast<size_t>(r)].model.get());
    }
    split.group = s3d::parallel::make_nccl_group(contexts);
    split.forward = std::make_unique<s3d::model::SequenceParallel>(replicas, *split.group);
    log(s3d::cat("sequence parallel: ", split.group->describe()));
  }
  return split.forward.get();
}

void Engine::Impl::gather_rank_fallbacks() {
  for (Rank& r : ranks) {
    std::vector<s3d::FallbackCount> counts;
    {
      s3d::ContextScope scope(*r.context);
      counts = s3d::fallback_counts();
      s3d::reset_fallbacks();
    }
    s3d::add_fallback_counts(counts);
  }
}

void Engine::Impl::release_ranks() {
  if (ranks.empty()) return;
  {
    s3d::ContextScope scope(*context);  // nothing of a request may still run on any device
    if (own_stream) cudaStreamSynchronize(own_stream);
  }
  for (Rank& r : ranks) {
    if (!r.context || !r.stream) continue;  // a rank whose set-up failed part way
    s3d::ContextScope scope(*r.context);
    cudaStreamSynchronize(r.stream);
  }
  splits.clear();
  for (Rank& r : ranks) {
    if (r.context) {
      s3d::ContextScope scope(*r.context);
      if (r.stream) cudaStreamSynchronize(r.stream);
      r.model.reset();
    }
    r.context.reset();
    if (r.stream) cudaStreamDestroy(r.stream);
  }
  ranks.clear();
}

}  // namespace sparse3d
