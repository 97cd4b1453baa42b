// How one request's tokens and attention heads split over the P ranks of a sequence-parallel group
// (docs/CONTRACTS.md, "Sequence parallelism"): the packed tokens in P contiguous row ranges, one per
// rank; the ranks in G groups of Q = P / G, each group whole assets (G = 1: all of them), its rows
// split evenly over its ranks, the heads in Q equal groups. Contiguous ranges keep the packed
// order: what the ranks hold, concatenated in rank order, is the request's own token order, so
// the all-to-all around self-attention lands every rank's rows straight into place and no
// permutation is ever applied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace s3d::parallel {

struct ShardPlan {
  int parts = 1;                   // P
  int groups = 1;                  // G, dividing P: groups of P / G consecutive ranks
  int heads = 0;                   // H, a multiple of P / G
  std::vector<int64_t> row_begin;  // P + 1 boundaries over the packed tokens

  // One group: the tokens in P contiguous ranges, the heads in P groups. Throws unless
  // 1 <= parts <= tokens (every rank holds at least one token) and parts divides heads.
  static ShardPlan split(int64_t tokens, int heads, int parts);
  // G groups of Q = P / G ranks, each group whole assets (CFG parallelism: batched CFG's
  // conditional assets in one group, the unconditional ones in the other): group g gets assets
  // [g B / G, (g + 1) B / G) of the B whose packed token offsets are `asset_offsets` [B + 1],
  // split over its Q ranks as `split` splits a request; self-attention exchanges within a group
  // only, with H / Q heads per rank. With G = P every attention sequence lies on one rank and
  // needs no exchange at all (`whole_assets`). Throws unless G divides P, B >= G, Q divides the
  // heads and every group has at least Q tokens.
  static ShardPlan grouped(const std::vector<int64_t>& asset_offsets, int heads, int parts,
                           int groups);
  // grouped with G = P: whole assets per rank.
  static ShardPlan by_assets(const std::vector<int64_t>& asset_offsets, int heads, int parts) {
    return grouped(asset_offsets, heads, parts, parts);
  }

  int group_size() const { return parts / groups; }  // Q
  bool whole_assets() const { return group_size() == 1; }
  int heads_per_part() const { return heads / group_size(); }
  int group_of(int rank) const { return rank / group_size(); }
  int64_t tokens() const { return row_begin.back(); }
  int64_t begin(int rank) const { return row_begin[static_cast<size_t>(rank)]; }
  int64_t end(int rank) const { return row_begin[static_cast<size_t>(rank) + 1]; }
  int64_t rows(int rank) const { return end(rank) - begin(rank); }
  // The rows of group g: [group_begin(g), group_end(g)).
  int64_t group_begin(int g) const { return begin(g * group_size()); }
  int64_t group_end(int g) const { return end((g + 1) * group_size() - 1); }
};

// Below this many tokens per rank a split is not chosen by itself: the per-token work of a rank
// would no longer fill the GPU, and two all-to-alls per block cost more than they save.
// Provisional: the crossover has not been measured on a multi-GPU machine yet (docs/DESIGN.md).
inline constexpr int64_t kMinTokensPerPart = 8192;

// What choose_parts decided, and why, in one line for logs and reports.
struct PartsChoice {
  int parts = 1;
  std::string reason;
  bool heads_limited = false;  // fewer than the devices because they do not divide the heads
};

// The engine's choice of P for a request of `tokens` tokens on `devices` GPUs of a model with
// `heads` heads: the largest P <= devices that divides the heads (12 heads on 8 GPUs: 6; no ring
// attention for the heads that do not divide) and leaves every rank at least `min_tokens_per_part`
// tokens, or 1.
PartsChoice choose_parts(int64_t tokens, int heads, int devices,
                         int64_t min_tokens_per_part = kMinTokensPerPart);

}  // namespace s3d::parallel
