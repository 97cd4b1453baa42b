// Serial or batched CFG per asset, chosen by measured latency (issue 6 item 2). Batched CFG
// runs both branches as one varlen batch (GEMMs see 2N rows, launches halve); whether that
// is faster depends on the token count and the GPU, so the choice comes from a `sparse3d
// bench` run that timed the path both ways: the ratio batched / serial is interpolated
// linearly in log(tokens) between the measured token counts (the nearest measured ratio
// outside them), and batched is chosen where it is below 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace s3d::sampler {

struct CfgTimingPoint {
  int64_t tokens = 0;
  double serial_s = 0, batched_s = 0;  // medians of whole loops, one bench run
};

struct CfgChoice {
  bool batched = false;
  double predicted_ratio = 1;  // batched / serial at the asset's token count
  std::string reason;          // one line: the evidence
};

// points: any order, tokens > 0 and distinct, times > 0 (checked). No points: serial (the
// original's mode), with the reason.
CfgChoice choose_cfg_mode(std::vector<CfgTimingPoint> points, int64_t tokens);

}  // namespace s3d::sampler
