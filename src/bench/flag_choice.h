// Whether to turn one optimization flag on for an asset, chosen by measured latency:
// serial or batched CFG (batched_cfg) and whether to capture CUDA graphs (cuda_graphs). Both
// win or lose depending on the token count and the GPU (batched CFG doubles GEMM M; a graph's
// capture costs more than its replays save when the forwards are long), so the choice comes
// from a `sparse3d bench` run that timed the path with the flag off and on: the ratio on / off
// is interpolated linearly in log(tokens) between the measured token counts (the nearest
// measured ratio outside them), and the flag is turned on where it is below 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparse3d/flags.h"

namespace s3d::bench {

struct FlagTimingPoint {
  int64_t tokens = 0;
  double off_s = 0, on_s = 0;  // medians of whole requests, one bench run
};

struct FlagChoice {
  bool on = false;
  double predicted_ratio = 1;  // on / off at the asset's token count
  std::string reason;          // one line: the decision and its evidence
};

// flag: the flag chosen (its name goes into the reason). points: any order, tokens > 0 and
// distinct, times > 0 (checked). No points: off, with the reason.
FlagChoice choose_flag(sparse3d::Flag flag, std::vector<FlagTimingPoint> points,
                       int64_t tokens);

}  // namespace s3d::bench
