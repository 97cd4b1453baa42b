// Sequence parallelism for one request (docs/CONTRACTS.md, "Sequence parallelism"; Ulysses-style, as
// in xDiT): the packed tokens of the request split over the P ranks of a group in contiguous row
// ranges (parallel/shard_plan.h), every per-token op of the trunk (the input and output layers, the
// modulated norms, every GEMM, the q/k RMSNorm and RoPE, the gated residuals, the cross-attention
// against the whole condition, the MLP) on each rank's own rows, and around the self-attention two
// exchanges of the group (parallel/group.h): q, k, v of each rank's rows go to the rank that owns
// their head group, each rank attends over all the tokens with H / P heads, and the outputs come
// back to the ranks that own the rows. The null-context paths, the condition K/V cache and every op
// candidate of the request's plan run on the shards as they do on the whole request.
//
// Contract (docs/CONTRACTS.md, "Sequence parallelism"): every op of a rank computes each row, and
// the attention each head, on its own, so on the CPU backend the sharded forward is bitwise equal
// to Transformer::forward for any P. On a GPU the GEMMs see M = T / P rows instead of T and the
// attention H / P heads, so cuBLASLt and cuDNN may pick other kernels: per forward rel L2 <= 1e-2
// against the unsharded forward of the same path.
#pragma once

#include <vector>

#include "model/trunk/transformer.h"
#include "parallel/group.h"
#include "parallel/shard_plan.h"

namespace s3d::model {

// A prepared request (Transformer::prepare, in rank 0's context) split over P ranks: rank r's
// Request covers rows [plan.begin(r), plan.end(r)) of it: the assets that have tokens there
// (first_asset[r] and on; an asset may be split over several ranks), their local layouts and batch
// indices, and its rows of the position tables, all in rank r's context; layouts[r] is the
// token layout of rank r's group's assets there (what rank r's attention over every token of its
// group reads; with one group, the whole request's). Built once per request, like the request.
struct ShardedRequest {
  parallel::ShardPlan plan;
  Request whole;
  std::vector<Request> shards;
  std::vector<int> first_asset;
  std::vector<attention::SeqLayout> layouts;
};

// A forward's condition and null-context path on every rank (each rank's assets' condition tokens
// and cached K/V, the null rows), moved into the ranks' contexts once per request.
struct ShardedCondition {
  std::vector<Condition> conds;
  std::vector<CondKV> kv;  // what conds[r].kv points at
  std::vector<NullPath> nulls;
  bool has_null = false;
  int null_assets = 0;  // of the whole request
};

class SequenceParallel {
 public:
  // replicas[r]: the model on rank r's device, loaded in the group's context r (for a LocalGroup
  // without contexts, the same model P times).
  SequenceParallel(std::vector<const Transformer*> replicas, parallel::Group& group);

  int parts() const { return static_cast<int>(replicas_.size()); }

  // Splits `whole` over the group's ranks (ShardPlan::grouped). With `groups` = 1 the tokens of
  // every asset over all P ranks; with G > 1 (CFG parallelism) the assets in G groups of P / G
  // ranks, each group's tokens split over its ranks, and self-attention exchanges within a group
  // only (with G = P: none, every rank attends alone with every head). Throws when G does not
  // divide P, P / G does not divide the heads, or there are fewer assets than groups or tokens
  // than ranks.
  ShardedRequest shard(const Request& whole, int groups = 1) const;
  ShardedRequest shard(const Request& whole, bool) const = delete;  // a count, not a switch
  // Checks `cond` and `null` as Transformer::forward does and moves the ranks' parts into their
  // contexts.
  ShardedCondition share(const ShardedRequest& sr, const Condition& cond,
                         const NullPath* null) const;

  // Transformer::forward of sr.whole with the same operands, computed by the P ranks; x, t1000 and
  // mod in rank 0's context, the velocity f32 [T, out] gathered there. The request's mlp_probe is
  // not supported (it needs the whole MLP input). `out`, when given, is the tensor the velocity is
  // written into (and returned).
  Tensor forward(const ShardedRequest& sr, const Tensor& x, const Tensor& t1000,
                 const ShardedCondition& cond, const Modulation* mod = nullptr,
                 Tensor out = Tensor()) const;
  // share() and the forward above, in one call.
  Tensor forward(const ShardedRequest& sr, const Tensor& x, const Tensor& t1000,
                 const Condition& cond, const NullPath* null = nullptr,
                 const Modulation* mod = nullptr, Tensor out = Tensor()) const;

 private:
  const Transformer& rank(int r) const { return *replicas_[static_cast<size_t>(r)]; }
  // Rank r's copy of `src` (in rank 0's context): for rank 0 `src` itself, for another rank a
  // tensor of its own, filled by a transfer added to `batch` (exchanged by the caller).
  Tensor moved(int r, const Tensor& src, std::vector<parallel::Transfer>& batch) const;
  // One block's self-attention across the ranks: h[r] becomes h[r] + gate * to_out(attn).
  void self_attention(int block, const ShardedRequest& sr, std::vector<Tensor>& h,
                      const std::vector<Modulation>& mods) const;
  // forward()'s first and last steps: each rank's embedded rows of x and (into mods) the
  // modulation of the assets it holds; the ranks' output layers gathered into `out` on rank 0.
  std::vector<Tensor> embed_shards(const ShardedRequest& sr, const Tensor& x, const Tensor& t1000,
                                   const Modulation* mod, std::vector<Modulation>& mods) const;
  Tensor gather_output(const ShardedRequest& sr, std::vector<Tensor>& h, Tensor out) const;
  // self_attention() with groups of Q > 1 ranks: the all-to-all of the q | k | v head groups
  // (heads[s]: rank s's head group of its group's tokens) and back (each rank's rows, all heads).
  std::vector<Tensor> heads_to_ranks(int block, const ShardedRequest& sr,
                                     const std::vector<Tensor>& h,
                                     const std::vector<Modulation>& mods) const;
  std::vector<Tensor> outputs_to_rows(const ShardedRequest& sr, std::vector<Tensor>& attn) const;

  std::vector<const Transformer*> replicas_;
  parallel::Group* group_;
};

}  // namespace s3d::model
