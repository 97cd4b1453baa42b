#include "parallel/shard_plan.h"

#include <algorithm>

#include "core/error.h"

namespace s3d::parallel {

ShardPlan ShardPlan::split(int64_t tokens, int heads, int parts) {
  S3D_CHECK(tokens >= 1, "sequence parallel: a request of ", tokens, " tokens");
  return grouped({0, tokens}, heads, parts, 1);
}

ShardPlan ShardPlan::grouped(const std::vector<int64_t>& asset_offsets, int heads, int parts,
                             int groups) {
  S3D_CHECK(parts >= 1, "sequence parallel: needs at least one rank, got ", parts);
  S3D_CHECK(heads >= 1, "sequence parallel: the model has ", heads, " attention heads");
  S3D_CHECK(groups >= 1 && parts % groups == 0, "CFG parallel: ", groups,
            " rank groups do not divide the ", parts, " ranks");
  const int assets = static_cast<int>(asset_offsets.size()) - 1;
  S3D_CHECK(assets >= groups, "CFG parallel: ", std::max(assets, 0),
            " assets cannot be split over ", groups,
            groups == parts ? " ranks (each rank needs a whole asset)"
                            : " rank groups (each group needs a whole asset)");
  const int q = parts / groups;
  S3D_CHECK(heads % q == 0, "sequence parallel: ", q, " ranks do not divide the ", heads,
            " attention heads (each rank attends over H / ", q, " whole heads)");
  ShardPlan p;
  p.parts = parts;
  p.groups = groups;
  p.heads = heads;
  p.row_begin.resize(static_cast<size_t>(parts) + 1);
  for (int g = 0; g < groups; ++g) {
    const int64_t a = asset_offsets[static_cast<size_t>(assets * g / groups)];
    const int64_t n = asset_offsets[static_cast<size_t>(assets * (g + 1) / groups)] - a;
    S3D_CHECK(n >= q, "sequence parallel: ", n, " tokens cannot be split over ", q,
              " ranks (each rank needs at least one)");
    for (int r = 0; r < q; ++r) p.row_begin[static_cast<size_t>(g * q + r)] = a + n * r / q;
  }
  p.row_begin.back() = asset_offsets.back();
  return p;
}

PartsChoice choose_parts(int64_t tokens, int heads, int devices, int64_t min_tokens_per_part) {
  S3D_CHECK(devices >= 1, "sequence parallel: needs at least one device, got ", devices);
  S3D_CHECK(heads >= 1, "sequence parallel: the model has ", heads, " attention heads");
  S3D_CHECK(min_tokens_per_part >= 1, "sequence parallel: min_tokens_per_part must be >= 1");
  int divides = 1;  // the largest P <= devices that divides the heads
  for (int p = devices; p >= 1; --p) {
    if (heads % p == 0) {
      divides = p;
      break;
    }
  }
  int parts = divides;
  while (parts > 1 && tokens / parts < min_tokens_per_part) {
    --parts;
    while (parts > 1 && heads % parts != 0) --parts;
  }
  std::string why;
  if (devices == 1) {
    why = "one device";
  } else if (parts == divides && divides == devices) {
    why = std::to_string(tokens) + " tokens: " + std::to_string(tokens / parts) + " per device";
  } else if (parts == divides) {
    why = std::to_string(devices) + " devices do not divide the " + std::to_string(heads) +
          " heads: the largest count that does";
  } else {
    why = std::to_string(tokens) + " tokens: fewer than " + std::to_string(min_tokens_per_part) +
          " per device on more";
  }
  return PartsChoice{
      parts, std::to_string(parts) + " of " + std::to_string(devices) + " devices (" + why + ")"};
}

}  // namespace s3d::parallel
