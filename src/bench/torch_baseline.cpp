// The PyTorch baseline (tools/torch_ref/run.py) in a child process: eager or compiled, by the
// bench's rules and, under the service protocol, in the engine's order.
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "bench/result_io.h"
#include "bench/run_state.h"
#include "core/error.h"

namespace s3d::bench {
namespace {

int run_process(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

void run_torch_baseline(const BenchOptions& o, const std::vector<Prepared>& assets,
                        int64_t warmup_tokens, bool compile, BenchResult& r, const Log& log) {
  const std::string name = compile ? "torch_compile" : "torch_eager";
  const std::string json = (std::filesystem::path(o.work_dir) / ("sparse3d_" + name + ".json")).string();
  std::filesystem::remove(json);
  std::string cmd = o.python + " " + shell_quote(o.torch_script) + " --checkpoint " +
                    shell_quote(o.checkpoint) + " --manifest " + shell_quote(o.manifest);
  for (const auto& a : assets) cmd += " --asset " + shell_quote(a.info.name);
  const auto& s = o.sampler;
  const bool service = o.protocol != Protocol::Repeated && !compile;
  cmd += cat(" --steps ", s.steps, " --rescale-t ", s.rescale_t, " --cfg ", s.guidance,
             " --interval ", s.interval_lo, " ", s.interval_hi, " --guidance-rescale ",
             s.guidance_rescale, " --cfg-mode serial --device ",
             o.device == sparse3d::DeviceChoice::CPU ? "cpu" : "cuda", " --time --quiet --warmup ",
             std::max(1, o.warmup), " --repeat ",
             service && o.protocol == Protocol::Service ? 0 : o.repeats,
             " --timing-json ", shell_quote(json));
  // The service protocol in the engine's order: the warm-up at the engine's warm-up count (a
  // dense model's: two copies of the first asset), then each asset's first call. A compiled
  // baseline compiles every asset in its warm-up: it has no first calls to time.
  if (service) {
    cmd += " --service";
    if (warmup_tokens > 0) cmd += cat(" --warmup-tokens ", warmup_tokens);
  }
  if (compile) cmd += " --compile blocks";
  const std::string logfile = json + ".log";
  log(cat("baseline ", name, ": ", cmd));
  int code = run_process(cmd + " > " + shell_quote(logfile) + " 2>&1");
  // Exit code 3 is run.py's "torch.compile failed", with the reason in the timing file.
  std::string failure;
  if (!std::filesystem::exists(json)) {
    failure = cat("exit code ", code, ", no timing file (log: ", logfile, ")");
  } else if (code != 0 && code != 3) {
    failure = cat("exit code ", code, " (log: ", logfile, ")");
  } else {
    try {
      add_baseline_timing(r, io::read_json_file(json), name, json);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (!failure.empty()) r.baselines.push_back(BaselineStatus{name, false, failure});
  if (!r.baselines.back().ran)
    log(cat("baseline ", name, " did not run: ", r.baselines.back().reason));
}

}  // namespace s3d::bench
