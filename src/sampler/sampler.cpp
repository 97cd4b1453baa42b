#include "sampler/sampler.h"

#include <chrono>
#include <cmath>

#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fallback.h"
#include "sampler/euler_cfg.h"
#include "sampler/graph_runner.h"
#include "sampler/step_forwards.h"
#include "sampler/step_plan.h"

namespace s3d::sampler {

Inputs pack(const std::vector<Inputs>& requests) {
  S3D_CHECK(!requests.empty(), "pack: no request to pack");
  const Inputs& first = requests[0];
  int64_t T = 0;
  int B = 0;
  for (const Inputs& r : requests) {
    S3D_CHECK(r.coords.defined() && r.coords.ndim() == 2 && r.coords.size(1) == 4 &&
                  r.coords.dtype() == DType::I32 && r.coords.device() == Device::CPU,
              "pack: coordinates must be host i32 [T, 4], got ", r.coords.describe());
    S3D_CHECK(r.cond.defined() && r.cond.ndim() == 3 && r.cond.size(0) == r.batch &&
                  r.cond.size(1) == first.cond.size(1) && r.cond.size(2) == first.cond.size(2) &&
                  r.cond.dtype() == first.cond.dtype(),
              "pack: every condition must be [B, ", first.cond.size(1), ", ",
              first.cond.size(2), "] of one dtype, got ", r.cond.describe());
    S3D_CHECK(r.noise.defined() && r.noise.size(0) == r.coords.size(0) &&
                  r.noise.shape() == Shape({r.coords.size(0), first.noise.size(1)}),
              "pack: noise must be [T, ", first.noise.size(1), "], got ", r.noise.describe());
    S3D_CHECK(r.concat_cond.defined() == first.concat_cond.defined(),
              "pack: either every request has concat_cond or none");
    T += r.coords.size(0);
    B += r.batch;
  }
  Inputs out;
  out.batch = B;
  out.coords = Tensor::empty({T, 4}, DType::I32, Device::CPU);
  out.noise = Tensor::empty({T, first.noise.size(1)}, DType::F32, Device::CPU);
  out.cond = Tensor::empty({B, first.cond.size(1), first.cond.size(2)}, first.cond.dtype(),
                           Device::CPU);
  if (first.concat_cond.defined())
    out.concat_cond = Tensor::empty({T, first.concat_cond.size(1)}, DType::F32, Device::CPU);
  int64_t row = 0;
  int asset = 0;
  int32_t* dst = out.coords.data_as<int32_t>();
  for (const Inputs& r : requests) {
    const int64_t n = r.coords.size(0);
    const int32_t* src = r.coords.data_as<int32_t>();
    for (int64_t t = 0; t < n; ++t) {
      S3D_CHECK(src[4 * t] >= 0 && src[4 * t] < r.batch, "pack: batch index ", src[4 * t],
                " of token ", t, " is outside [0, ", r.batch, ")");
      dst[4 * (row + t)] = src[4 * t] + asset;
      for (int k = 1; k < 4; ++k) dst[4 * (row + t) + k] = src[4 * t + k];
    }
    out.noise.rows(row, row + n).copy_from(r.noise);
    if (out.concat_cond.defined()) out.concat_cond.rows(row, row + n).copy_from(r.concat_cond);
    out.cond.rows(asset, asset + r.batch).copy_from(r.cond);
    row += n;
    asset += r.batch;
  }
  return out;
}

std::vector<int64_t> pack_offsets(const std::vector<Inputs>& requests) {
  std::vector<int64_t> off = {0};
  for (const Inputs& r : requests) off.push_back(off.back() + r.coords.size(0));
  return off;
}

SamplerOptions SamplerOptions::protocol() { return SamplerOptions{}; }

void SamplerOptions::apply(const sparse3d::ExecutionPlan& plan) { flags = plan.flags(); }


SamplerOptions SamplerOptions::released() {
  return SamplerOptions(sparse3d::SamplerSettings::released(), {});
}

std::vector<double> timesteps(int steps, double rescale_t) {
  std::vector<double> t(static_cast<size_t>(steps) + 1);
  for (int k = 0; k <= steps; ++k) {
    // numpy.linspace(1, 0, steps + 1): start + k * step, the last value exactly 0.
    double s = k == steps ? 0.0 : 1.0 + k * (-1.0 / steps);
    t[k] = rescale_t * s / (1.0 + (rescale_t - 1.0) * s);
  }
  return t;
}

namespace {

// Checks the inputs against the model before anything is uploaded.
void check_inputs(const model::Transformer& model, const Inputs& in) {
  const auto& cfg = model.config();
  check_tensor(in.noise, "sampler noise", DType::F32, {in.coords.size(0), cfg.out_channels});
  S3D_CHECK(in.cond.defined() && in.cond.ndim() == 3 && in.cond.size(0) == in.batch &&
                in.cond.size(2) == cfg.cond_channels,
            "sampler: condition must be [", in.batch, ", L, ", cfg.cond_channels, "], got ",
            in.cond.describe());
}

// A copy that outlives the buffer it came from (a graph's output, a view into v2).
Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

// A request that can be stopped (SamplerOptions::stop) keeps the host at most one step ahead
// of the device: after step k is queued, the host waits for step k - 1 to finish. Without it
// an unsynchronised loop queues every step in milliseconds, and a stop asked between them
// would still wait for the whole request. The device always has the next step queued, so it
// never idles for this.
class StepFence {
 public:
  explicit StepFence(bool on) {
    if (!on) return;
    for (cudaEvent_t& e : events_)
      S3D_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~StepFence() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  StepFence(const StepFence&) = delete;
  StepFence& operator=(const StepFence&) = delete;

  // Step k is queued: mark it, and wait for step k - 1.
  void queued(int k) {
    if (!events_[0]) return;
    S3D_CUDA_CHECK(cudaEventRecord(events_[k & 1], current_stream()));
    if (k > 0) S3D_CUDA_CHECK(cudaEventSynchronize(events_[(k - 1) & 1]));
  }

 private:
  cudaEvent_t events_[2] = {nullptr, nullptr};
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Output sample(const model::Transformer& model, const Inputs& in,
              const SamplerOptions& options, bool keep_first_forward,
              const StepCallback& on_step) {
  options.validate();
  SamplerOptions o = options;
  o.unbiased_rescale_std = model.summary().unbiased_rescale_std;
  check_inputs(model, in);
  const Device dev = model.device();
  // The request's clock: from here to the loop's start is its set-up (Output::setup_seconds).
  if (dev == Device::CUDA) synchronize();
  const auto request_start = std::chrono::steady_clock::now();
  const StepPlan plan = plan_steps(o);
  const StepForwards forwards(model, in, o, plan);
  const Tensor mod0 = forwards.step_mod(0);
  bool capture = o.flags.on(sparse3d::Flag::cuda_graphs);
  if (capture && o.parallel && o.parallel->parts() > 1) {
    record_fallback(sparse3d::Flag::cuda_graphs,
                    "sequence parallel: a request split over several ranks runs its steps eagerly");
    capture = false;
  }
  GraphRunner graphs(capture, dev, plan, in.noise.shape(), {2 * in.batch},
                     mod0.defined() ? mod0.shape() : Shape{});
  Tensor x = in.noise.to(dev);
  Output out;
  if (dev == Device::CUDA) synchronize();
  out.launches_before_loop = launch_counts();
  const auto start = std::chrono::steady_clock::now();
  out.setup_seconds = std::chrono::duration<double>(start - request_start).count();
  StepFence fence((o.stop || o.progress) && dev == Device::CUDA);
  // A progress callback that throws leaves the queued work to finish first (it reads this
  // request's tensors).
  const auto report = [&](int done) {
    try {
      o.progress(done, o.steps);
    } catch (...) {
      if (dev == Device::CUDA) synchronize();
      throw;
    }
  };
  for (int k = 0; k < o.steps; ++k) {
    const StepKind kind = plan.kinds[static_cast<size_t>(k)];
    const auto run = [&](const Tensor& xs, const Tensor& t2, const Tensor& mod) {
      return forwards.run(k, xs, t2, mod);
    };
    const StepOut so = graphs.step(k, x, forwards.t_row(k), forwards.step_mod(k), run, out);
    if (k == 0 && keep_first_forward) {
      out.first_v_cond = so.v_cond.defined() ? copy_of(so.v_cond) : Tensor();
      out.first_v_uncond = so.v_uncond.defined() ? copy_of(so.v_uncond) : Tensor();
    }
    x = euler_cfg_step(x, so, kind, plan.t[k], plan.t[k + 1], o, forwards.request());
    StepRecord rec{k, o.steps, plan.t[k], plan.t[k + 1], kind.uncond, 0.0};
    // A progress line needs the step finished; without one the loop runs unsynchronised.
    if (on_step && dev == Device::CUDA) synchronize();
    rec.elapsed_s = seconds_since(start);
    out.steps.push_back(rec);
    if (on_step) on_step(rec, x);
    fence.queued(k);
    if (o.progress && dev != Device::CUDA) report(k + 1);
    if (o.progress && dev == Device::CUDA && k > 0) report(k);  // step k - 1 is done
    if (o.stop && k + 1 < o.steps && o.stop()) {
      // The queued work still reads this request's tensors: it finishes before they go.
      if (dev == Device::CUDA) synchronize();
      fail("sample: interrupted after step ", k + 1, " of ", o.steps);
    }
  }
  if (dev == Device::CUDA) synchronize();
  out.loop_seconds = seconds_since(start);
  if (o.progress && dev == Device::CUDA) o.progress(o.steps, o.steps);
  out.latent = x;
  return out;
}

}  // namespace s3d::sampler
