#include "parallel/shard_plan.h"

#include "core/error.h"

namespace s3d::parallel {

ShardPlan ShardPlan::split(int64_t tokens, int heads, int parts) {
  S3D_CHECK(parts >= 1, "sequence parallel: needs at least one rank, got ", parts);
  S3D_CHECK(heads >= 1, "sequence parallel: the model has ", heads, " attention heads");
  S3D_CHECK(heads % parts == 0, "sequence parallel: ", parts, " ranks do not divide the ", heads,
            " attention heads (each rank attends over H / P whole heads)");
  S3D_CHECK(tokens >= parts, "sequence parallel: ", tokens, " tokens cannot be split over ", parts,
            " ranks (each rank needs at least one)");
  ShardPlan p;
  p.parts = parts;
  p.heads = heads;
  p.row_begin.resize(static_cast<size_t>(parts) + 1);
  for (int r = 0; r <= parts; ++r) p.row_begin[static_cast<size_t>(r)] = tokens * r / parts;
  return p;
}

ShardPlan ShardPlan::by_assets(const std::vector<int64_t>& asset_offsets, int heads, int parts) {
  const int assets = static_cast<int>(asset_offsets.size()) - 1;
  S3D_CHECK(parts >= 1 && assets >= parts, "CFG parallel: ", std::max(assets, 0),
            " assets cannot be split over ", parts, " ranks (each rank needs a whole asset)");
  ShardPlan p;
  p.parts = parts;
  p.heads = heads;
  p.whole_assets = true;
  p.row_begin.resize(static_cast<size_t>(parts) + 1);
  for (int r = 0; r <= parts; ++r)
    p.row_begin[static_cast<size_t>(r)] = asset_offsets[static_cast<size_t>(assets * r / parts)];
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
