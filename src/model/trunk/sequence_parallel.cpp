#include "model/trunk/sequence_parallel.h"

#include <algorithm>
#include <cstdint>

#include "attention/attention.h"
#include "core/error.h"
#include "kernels/elementwise.h"
#include "ops/sdpa.h"

namespace s3d::model {
namespace {

using parallel::RankScope;
using parallel::Transfer;

size_t idx(int r) { return static_cast<size_t>(r); }

// A bf16 [rows, cols] tensor of rank r (allocated in its context).
Tensor bf16_on(parallel::Group& group, int r, Device device, int64_t rows, int64_t cols) {
  RankScope scope(group, r);
  return Tensor::empty({rows, cols}, DType::BF16, device);
}

// The rows of rank r's group.
int64_t group_rows(const parallel::ShardPlan& plan, int r) {
  const int g = plan.group_of(r);
  return plan.group_end(g) - plan.group_begin(g);
}

// Rank r's rows within its group's [T_g] rows of any rank of the group.
Tensor rows_in_group(const parallel::ShardPlan& plan, const Tensor& t, int r) {
  const int64_t base = plan.group_begin(plan.group_of(r));
  return t.rows(plan.begin(r) - base, plan.end(r) - base);
}

// Rows [r0, r1) of a prepared request, on the host: the assets with tokens there (from b0,
// renumbered from 0), their token counts, and how many of them have a real condition.
struct ShardRows {
  int b0 = 0, batch = 0, conditional = 0;
  std::vector<int32_t> lengths, offsets, batch_index;
};

ShardRows shard_rows(const Request& w, int64_t r0, int64_t r1) {
  const std::vector<int64_t>& off = w.tokens_layout.offsets;
  ShardRows s;
  while (off[idx(s.b0) + 1] <= r0) ++s.b0;
  int b1 = s.b0;  // one past the last asset with a token in [r0, r1)
  while (b1 < w.batch && off[idx(b1)] < r1) ++b1;
  s.batch = b1 - s.b0;
  s.lengths.resize(idx(s.batch));
  s.offsets.assign(idx(s.batch) + 1, 0);
  s.batch_index.resize(static_cast<size_t>(r1 - r0));
  for (int k = 0; k < s.batch; ++k) {
    const int64_t a = std::max(off[idx(s.b0 + k)], r0);
    const int64_t e = std::min(off[idx(s.b0 + k) + 1], r1);
    s.lengths[idx(k)] = static_cast<int32_t>(e - a);
    s.offsets[idx(k) + 1] = s.offsets[idx(k)] + s.lengths[idx(k)];
    std::fill(s.batch_index.begin() + (a - r0), s.batch_index.begin() + (e - r0), k);
  }
  // The null assets are the last ones of the whole request, so the last ones of a shard.
  s.conditional = std::clamp(w.batch - w.null_assets - s.b0, 0, s.batch);
  return s;
}

}  // namespace

SequenceParallel::SequenceParallel(std::vector<const Transformer*> replicas, parallel::Group& group)
    : replicas_(std::move(replicas)), group_(&group) {
  S3D_CHECK(!replicas_.empty() && static_cast<int>(replicas_.size()) == group.size(),
            "sequence parallel: ", replicas_.size(), " model replicas for a group of ",
            group.size(), " ranks (", group.describe(), ")");
  for (const Transformer* m : replicas_) {
    S3D_CHECK(m != nullptr, "sequence parallel: a model replica is missing");
    S3D_CHECK(m->device() == replicas_[0]->device() &&
                  m->weights_version() == replicas_[0]->weights_version(),
              "sequence parallel: every rank must hold the same weights on the "
              "same backend");
  }
}

Tensor SequenceParallel::moved(int r, const Tensor& src, std::vector<Transfer>& batch) const {
  if (!src.defined()) return Tensor();
  if (r == 0) return src;  // already in rank 0's context: a view, no copy
  Tensor dst;
  {
    RankScope scope(*group_, r);
    dst = Tensor::empty(src.shape(), src.dtype(), src.device());
  }
  batch.push_back({0, r, src, dst});
  return dst;
}

ShardedRequest SequenceParallel::shard(const Request& whole, int groups) const {
  ShardedRequest sr;
  const int heads = rank(0).config().num_heads;
  sr.plan = parallel::ShardPlan::grouped(whole.tokens_layout.offsets, heads, parts(), groups);
  sr.whole = whole;
  const Device dev = whole.tokens_layout.device;
  std::vector<Transfer> batch;
  for (int r = 0; r < parts(); ++r) {
    const int64_t r0 = sr.plan.begin(r), r1 = sr.plan.end(r);
    const ShardRows rows = shard_rows(whole, r0, r1);
    Request s;
    s.batch = rows.batch;
    s.tokens = r1 - r0;
    s.cond_tokens = whole.cond_tokens;
    s.null_assets = rows.batch - rows.conditional;
    s.cond_part_tokens = rows.offsets[idx(rows.conditional)];
    {
      RankScope scope(*group_, r);
      s.batch_index = Tensor::from_ints(rows.batch_index, {s.tokens}).to(dev);
      s.token_offsets = Tensor::from_ints(rows.offsets, {rows.batch + 1}).to(dev);
      s.tokens_layout = attention::make_seq_layout(rows.lengths, dev);
      s.cond_layout =
          attention::make_seq_layout(std::vector<int32_t>(idx(rows.batch), whole.cond_tokens), dev);
      if (s.null_assets > 0 && rows.conditional > 0) {
        s.cond_part_tokens_layout = attention::make_seq_layout(
            std::vector<int32_t>(rows.lengths.begin(), rows.lengths.begin() + rows.conditional),
            dev);
        s.cond_part_cond_layout = attention::make_seq_layout(
            std::vector<int32_t>(idx(rows.conditional), whole.cond_tokens), dev);
      }
      const int g = sr.plan.group_of(r);
      sr.layouts.push_back(attention::make_seq_layout(
          shard_rows(whole, sr.plan.group_begin(g), sr.plan.group_end(g)).lengths, dev));
    }
    auto part = [&](const Tensor& t) { return t.defined() ? t.rows(r0, r1) : Tensor(); };
    s.coords = moved(r, part(whole.coords), batch);
    s.rope_cos = moved(r, part(whole.rope_cos), batch);
    s.rope_sin = moved(r, part(whole.rope_sin), batch);
    s.position_f32 = moved(r, part(whole.position_f32), batch);
    s.concat_cond = moved(r, part(whole.concat_cond), batch);
    s.use_flags(whole.flags, whole.ops.plan_store());
    s.mlp_chunk_tokens = whole.mlp_chunk_tokens;
    sr.shards.push_back(std::move(s));
    sr.first_asset.push_back(rows.b0);
  }
  group_->exchange(batch);
  return sr;
}

ShardedCondition SequenceParallel::share(const ShardedRequest& sr, const Condition& cond,
                                         const NullPath* null) const {
  rank(0).check_condition_operands(sr.whole, cond, null);
  const int P = parts();
  const int64_t L = sr.whole.cond_tokens;
  const int real = sr.whole.batch - cond.null_assets;  // the first assets have real tokens
  ShardedCondition sc;
  sc.conds.resize(idx(P));
  sc.kv.resize(idx(P));
  sc.nulls.resize(idx(P));
  sc.has_null = null != nullptr;
  sc.null_assets = cond.null_assets;
  std::vector<Transfer> batch;
  for (int r = 0; r < P; ++r) {
    const int b0 = sr.first_asset[idx(r)], nb = sr.shards[idx(r)].batch;
    const int c_end = std::min(b0 + nb, real);
    const int nc = std::max(0, c_end - b0);
    Condition& c = sc.conds[idx(r)];
    c.null_assets = nb - nc;
    if (nc > 0) {
      c.tokens = moved(r, cond.tokens.rows(b0, c_end), batch);
      if (cond.kv) {
        for (const Tensor& t : cond.kv->kv)
          sc.kv[idx(r)].kv.push_back(moved(r, t.rows(b0 * L, c_end * L), batch));
        for (const Tensor& t : cond.kv->k_normed)
          sc.kv[idx(r)].k_normed.push_back(moved(r, t.rows(b0 * L, c_end * L), batch));
      }
    }
    if (null) {
      sc.nulls[idx(r)].mode = null->mode;
      for (const Tensor& row : null->rows) sc.nulls[idx(r)].rows.push_back(moved(r, row, batch));
    }
  }
  group_->exchange(batch);
  return sc;
}

Tensor SequenceParallel::forward(const ShardedRequest& sr, const Tensor& x, const Tensor& t1000,
                                 const Condition& cond, const NullPath* null, const Modulation* mod,
                                 Tensor out) const {
  rank(0).check_step_operands(sr.whole, x, t1000, mod);
  return forward(sr, x, t1000, share(sr, cond, null), mod, std::move(out));
}

Tensor SequenceParallel::forward(const ShardedRequest& sr, const Tensor& x, const Tensor& t1000,
                                 const ShardedCondition& sc, const Modulation* mod,
                                 Tensor out) const {
  const Transformer& m0 = rank(0);
  const Request& whole = sr.whole;
  const int P = parts();
  m0.check_resident();
  m0.check_step_operands(whole, x, t1000, mod);
  S3D_CHECK(sr.plan.parts == P && sr.shards.size() == idx(P) && sr.plan.tokens() == whole.tokens,
            "sequence parallel: the request was sharded for ", sr.plan.parts,
            " ranks, the group has ", P);
  S3D_CHECK(sc.conds.size() == idx(P), "sequence parallel: the condition was shared over ",
            sc.conds.size(), " ranks, the group has ", P);
  S3D_CHECK(!whole.mlp_probe,
            "sequence parallel: the per-layer MLP probe needs the whole MLP "
            "input; run it on one device");
  const ModelConfig& c = m0.config();

  std::vector<Modulation> mods(idx(P));
  std::vector<Tensor> h = embed_shards(sr, x, t1000, mod, mods);

  for (int i = 0; i < c.num_blocks; ++i) {
    self_attention(i, sr, h, mods);
    for (int r = 0; r < P; ++r) {
      RankScope scope(*group_, r);
      const Transformer& m = rank(r);
      const Request& s = sr.shards[idx(r)];
      Condition cond = sc.conds[idx(r)];
      if (!sc.kv[idx(r)].kv.empty()) cond.kv = &sc.kv[idx(r)];
      const NullPath* null = sc.has_null ? &sc.nulls[idx(r)] : nullptr;
      h[idx(r)] = m.cross_attention(i, s, h[idx(r)], cond, null);
      h[idx(r)] = m.mlp(i, m.weights_.blocks[idx(i)], s, h[idx(r)], mods[idx(r)].blocks[idx(i)]);
    }
  }

  return gather_output(sr, h, std::move(out));
}

std::vector<Tensor> SequenceParallel::embed_shards(const ShardedRequest& sr, const Tensor& x,
                                                   const Tensor& t1000, const Modulation* mod,
                                                   std::vector<Modulation>& mods) const {
  const int P = parts();
  // Each rank's rows of x, and the modulation of the assets it holds (given, or computed from t on
  // every rank).
  std::vector<Transfer> batch;
  std::vector<Tensor> xs(idx(P)), ts(idx(P));
  for (int r = 0; r < P; ++r) {
    xs[idx(r)] = moved(r, x.rows(sr.plan.begin(r), sr.plan.end(r)), batch);
    const int b0 = sr.first_asset[idx(r)], nb = sr.shards[idx(r)].batch;
    if (mod) {
      for (const Tensor& m : mod->blocks)
        mods[idx(r)].blocks.push_back(moved(r, m.rows(b0, b0 + nb), batch));
    } else {
      ts[idx(r)] = moved(r, t1000, batch);
    }
  }
  group_->exchange(batch);
  batch.clear();
  std::vector<Tensor> h(idx(P));
  for (int r = 0; r < P; ++r) {
    RankScope scope(*group_, r);
    const Request& s = sr.shards[idx(r)];
    if (!mod) {
      const int b0 = sr.first_asset[idx(r)];
      for (const Tensor& m : rank(r).modulation(s.ops, ts[idx(r)]).blocks)
        mods[idx(r)].blocks.push_back(m.rows(b0, b0 + s.batch));
    }
    h[idx(r)] = rank(r).embed_input(s, xs[idx(r)]);
    xs[idx(r)] = Tensor();
  }
  return h;
}

Tensor SequenceParallel::gather_output(const ShardedRequest& sr, std::vector<Tensor>& h,
                                       Tensor out) const {
  const Transformer& m0 = rank(0);
  const Request& whole = sr.whole;
  const ModelConfig& c = m0.config();
  const int P = parts();
  std::vector<Transfer> batch;
  // The output layer on each rank's rows, gathered on rank 0.
  Tensor v = out;
  if (v.defined()) {
    check_tensor(v, "sequence parallel output", DType::F32, {whole.tokens, c.out_channels});
    S3D_CHECK(v.device() == m0.device(), "sequence parallel: the output must be on ",
              device_name(m0.device()));
  } else {
    RankScope scope(*group_, 0);
    v = Tensor::empty({whole.tokens, c.out_channels}, DType::F32, m0.device());
  }
  std::vector<Tensor> vs(idx(P));
  for (int r = 0; r < P; ++r) {
    RankScope scope(*group_, r);
    vs[idx(r)] = rank(r).output_layer(sr.shards[idx(r)].ops, h[idx(r)]);
    h[idx(r)] = Tensor();
    batch.push_back({r, 0, vs[idx(r)], v.rows(sr.plan.begin(r), sr.plan.end(r))});
  }
  group_->exchange(batch);
  return v;
}

// The all-to-all within each group of Q ranks (with one group, all P): rank r's q | k | v rows
// [T_r, 3C] become, on rank s of its group, rows [begin(r), end(r)) (counted from the group's first
// row) of its [T_g, 3C/Q], head group s mod Q of every token of the group; after the attention rank
// s's output rows of rank r, head group s mod Q, go back to rank r into columns [(s mod Q) C/Q,
// (s mod Q + 1) C/Q). With whole assets per rank (Q = 1) every sequence is on one rank: each runs
// the one-device branch on its rows.
void SequenceParallel::self_attention(int block, const ShardedRequest& sr, std::vector<Tensor>& h,
                                      const std::vector<Modulation>& mods) const {
  const parallel::ShardPlan& plan = sr.plan;
  const int P = parts(), Q = plan.group_size();
  if (Q == 1) {
    for (int r = 0; r < P; ++r) {
      RankScope scope(*group_, r);
      const Transformer& m = rank(r);
      h[idx(r)] = m.self_attention(m.weights_.blocks[idx(block)], sr.shards[idx(r)], h[idx(r)],
                                   mods[idx(r)].blocks[idx(block)]);
    }
    return;
  }
  const ModelConfig& c = rank(0).config();
  const int64_t Cp = c.model_channels / Q;
  const int Hp = plan.heads_per_part(), D = c.head_dim();
  std::vector<Tensor> heads = heads_to_ranks(block, sr, h, mods);

  std::vector<Tensor> attn(idx(P));  // rank s: its head group of its group's outputs, [T_g, Cp]
  for (int s = 0; s < P; ++s) {
    const int64_t Tg = group_rows(plan, s);
    attn[idx(s)] = bf16_on(*group_, s, rank(s).device(), Tg, Cp);
    RankScope scope(*group_, s);
    const Tensor& in = heads[idx(s)];
    ops::sdpa(sr.shards[idx(s)].ops, RowView{in, 0, Tg, Cp, 3 * Cp}, sr.layouts[idx(s)],
              RowView{in, Cp, Tg, Cp, 3 * Cp}, RowView{in, 2 * Cp, Tg, Cp, 3 * Cp},
              sr.layouts[idx(s)], Hp, D, rank(s).attention_scale(), attn[idx(s)]);
    heads[idx(s)] = Tensor();
  }

  std::vector<Tensor> joined = outputs_to_rows(sr, attn);
  for (int r = 0; r < P; ++r) {
    RankScope scope(*group_, r);
    const Transformer& m = rank(r);
    h[idx(r)] = m.attention_output(m.weights_.blocks[idx(block)], sr.shards[idx(r)], h[idx(r)],
                                   std::move(joined[idx(r)]), mods[idx(r)].blocks[idx(block)]);
  }
}

std::vector<Tensor> SequenceParallel::heads_to_ranks(int block, const ShardedRequest& sr,
                                                     const std::vector<Tensor>& h,
                                                     const std::vector<Modulation>& mods) const {
  const parallel::ShardPlan& plan = sr.plan;
  const int P = parts(), Q = plan.group_size();
  const int64_t C = rank(0).config().model_channels, Cp = C / Q;
  std::vector<Tensor> heads(idx(P));  // rank s: its head group of its group's tokens, [T_g, 3 Cp]
  for (int s = 0; s < P; ++s)
    heads[idx(s)] = bf16_on(*group_, s, rank(s).device(), group_rows(plan, s), 3 * Cp);
  std::vector<Transfer> batch;
  for (int r = 0; r < P; ++r) {
    RankScope scope(*group_, r);
    const Transformer& m = rank(r);
    const int64_t Tr = plan.rows(r);
    const Tensor qkv = m.attention_input(m.weights_.blocks[idx(block)], sr.shards[idx(r)],
                                         h[idx(r)], mods[idx(r)].blocks[idx(block)]);
    for (int j = 0; j < Q; ++j) {
      const int s = plan.group_of(r) * Q + j;
      Tensor pack = bf16_on(*group_, r, m.device(), Tr, 3 * Cp);  // q, k, v of head group j
      for (int i = 0; i < 3; ++i) {
        RowView dst = RowView::columns(pack, i * Cp, Cp);
        kernels::copy_rows(RowView{qkv, i * C + j * Cp, Tr, Cp, 3 * C}, dst);
      }
      batch.push_back({r, s, pack, rows_in_group(plan, heads[idx(s)], r)});
    }
  }
  group_->exchange(batch);
  return heads;
}

std::vector<Tensor> SequenceParallel::outputs_to_rows(const ShardedRequest& sr,
                                                      std::vector<Tensor>& attn) const {
  const parallel::ShardPlan& plan = sr.plan;
  const int P = parts(), Q = plan.group_size();
  const int64_t C = rank(0).config().model_channels, Cp = C / Q;
  std::vector<Transfer> batch;
  std::vector<std::vector<Tensor>> back(idx(P));  // back[r][j]: rank r's rows of head group j
  for (int r = 0; r < P; ++r) {
    for (int j = 0; j < Q; ++j) {
      const int s = plan.group_of(r) * Q + j;
      back[idx(r)].push_back(bf16_on(*group_, r, rank(r).device(), plan.rows(r), Cp));
      batch.push_back({s, r, rows_in_group(plan, attn[idx(s)], r), back[idx(r)].back()});
    }
  }
  group_->exchange(batch);
  attn.clear();
  std::vector<Tensor> joined(idx(P));  // rank r: its rows, every head group, [T_r, C]
  for (int r = 0; r < P; ++r) {
    joined[idx(r)] = bf16_on(*group_, r, rank(r).device(), plan.rows(r), C);
    RankScope scope(*group_, r);
    for (int j = 0; j < Q; ++j) {
      RowView dst = RowView::columns(joined[idx(r)], j * Cp, Cp);
      kernels::copy_rows(RowView::of(back[idx(r)][idx(j)]), dst);
    }
    back[idx(r)].clear();
  }
  return joined;
}

}  // namespace s3d::model
