"""Cross-check the oracle against the original TRELLIS.2 code, imported at run time from a
local checkout of microsoft/TRELLIS.2 that you provide (nothing of it lives in this repo).

  python3 tools/torch_ref/check_original.py --trellis2 /path/to/TRELLIS.2 [--device cuda] \
      [--only slat|dense]

For several random configs of the structured-latent model (SLatFlowModel) and of the dense
sparse-structure model (SparseStructureFlowModel) it builds both models from the same
weights, compares one forward pass and 4-step samples (CFG serial, interval + rescale,
g = 1, g = 0) bit for bit, and prints one line per check, then "N passed, N failed". For
the dense model it also compares the position tables (the original's buffer vs the
oracle's host table) and a load of the original's own state dict (buffer included).

The original's sparse attention calls flash_attn, which is not installed here; both sides
therefore run the same per-asset scaled_dot_product_attention (a stand-in flash_attn
module injected below), so any difference is in everything else: norms, RoPE,
modulation, casts, timestep embedding, sampler arithmetic. The dense model's full
attention goes through trellis2/modules/attention, whose backend is chosen by the
ATTN_BACKEND environment variable: set to "sdpa" here (torch's
scaled_dot_product_attention on [B, H, N, D]), the sparse modules keep the stand-in
through SPARSE_ATTN_BACKEND.
"""
import argparse
import importlib
import importlib.util
import os
import sys
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import io_formats  # noqa: E402
import sampler as oracle_sampler  # noqa: E402
import dense  # noqa: E402
from model import ModelConfig, SLatFlowModel  # noqa: E402


def _sdpa_segments(q, k, v, cu_q, cu_k):
    out = torch.empty_like(q)
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        o = F.scaled_dot_product_attention(q[cq[b]:cq[b + 1]].transpose(0, 1).unsqueeze(0),
                                           k[ck[b]:ck[b + 1]].transpose(0, 1).unsqueeze(0),
                                           v[ck[b]:ck[b + 1]].transpose(0, 1).unsqueeze(0))
        out[cq[b]:cq[b + 1]] = o[0].transpose(0, 1)
    return out


def install_stand_ins(root):
    """A flash_attn module with the three varlen entry points the original uses, and a bare
    'trellis2' package (its __init__ imports renderers and pipelines we do not need)."""
    fa = types.ModuleType("flash_attn")
    fa.flash_attn_varlen_qkvpacked_func = \
        lambda qkv, cu, max_len: _sdpa_segments(*qkv.unbind(1), cu, cu)
    fa.flash_attn_varlen_kvpacked_func = \
        lambda q, kv, cq, ck, mq, mk: _sdpa_segments(q, *kv.unbind(1), cq, ck)
    fa.flash_attn_varlen_func = lambda q, k, v, cq, ck, mq, mk: _sdpa_segments(q, k, v, cq, ck)
    sys.modules["flash_attn"] = fa
    os.environ["SPARSE_ATTN_BACKEND"] = "flash_attn"
    os.environ["ATTN_BACKEND"] = "sdpa"        # the dense model's full attention
    # The sampler module imports tqdm and easydict; the GPU machine may have neither.
    if importlib.util.find_spec("tqdm") is None:
        m = types.ModuleType("tqdm")
        m.tqdm = lambda iterable, *args, **kwargs: iterable
        sys.modules["tqdm"] = m
    if importlib.util.find_spec("easydict") is None:
        class EasyDict(dict):
            __getattr__ = dict.__getitem__

            def __setattr__(self, key, value):
                self[key] = value
        m = types.ModuleType("easydict")
        m.EasyDict = EasyDict
        sys.modules["easydict"] = m
    pkg = types.ModuleType("trellis2")
    pkg.__path__ = [os.path.join(root, "trellis2")]
    sys.modules["trellis2"] = pkg


VARIANTS = [
    ("rope, share_mod, qk norms", {}, (37, 64), 0),
    ("ape, per-block adaLN, no qk norms", {"share_mod": False, "pe_mode": "ape",
                                           "qk_rms_norm": False, "qk_rms_norm_cross": False},
     (37, 64), 0),
    ("rope without self-attn norm, 4 heads x 32, mlp 5.3334",
     {"qk_rms_norm": False, "num_heads": None, "num_head_channels": 32, "mlp_ratio": 5.3334},
     (29, 50), 0),
    ("texture model (concat_cond)", {"in_channels": 64}, (37, 64), 32),
    ("release width (1536, 12 x 128, 1024 cond), 2 blocks",
     {"model_channels": 1536, "cond_channels": 1024, "num_blocks": 2, "num_heads": 12,
      "mlp_ratio": 5.3334}, (120, 77), 0),
]

# Dense variants: overrides of fixtures.TINY_SS_ARGS (R = 8, 8 channels, C = 128, 2 heads),
# the number of assets (each with its own condition rows, as the original needs), and what
# to compare: "all" (tables, forward, samples) or "tables" (the position table and a load
# of the original's state dict). bf16 matmuls are slow on a CPU without bf16 units (a
# release-width forward of 512 tokens takes about 30 s on 2 cores), hence R = 4 at the
# release width and tables only at the released 16^3 grid.
DENSE_VARIANTS = [
    ("dense rope, share_mod, qk norms", {}, 2, "all"),
    ("dense ape, per-block adaLN, no qk norms",
     {"pe_mode": "ape", "share_mod": False, "qk_rms_norm": False, "qk_rms_norm_cross": False},
     2, "all"),
    ("dense ape, share_mod, qk norms", {"pe_mode": "ape"}, 1, "all"),
    ("dense rope, per-block adaLN, cross norm only, 4 x 32, mlp 5.3334, rope_freq ignored",
     {"share_mod": False, "qk_rms_norm": False, "num_heads": None, "num_head_channels": 32,
      "mlp_ratio": 5.3334, "rope_freq": [2.0, 100.0]}, 2, "all"),
    ("dense release width (1536, 12 x 128, 1024 cond), 2 blocks, R 4",
     {"resolution": 4, "model_channels": 1536, "cond_channels": 1024, "num_heads": 12,
      "mlp_ratio": 5.3334}, 1, "all"),
    ("dense released shape (R 16, 1536, 12 x 128), rope", {
        "resolution": 16, "model_channels": 1536, "cond_channels": 1024, "num_heads": 12,
        "mlp_ratio": 5.3334, "num_blocks": 1}, 1, "tables"),
    ("dense released shape (R 16, 1536), ape", {
        "resolution": 16, "model_channels": 1536, "cond_channels": 1024, "num_heads": 12,
        "mlp_ratio": 5.3334, "num_blocks": 1, "pe_mode": "ape"}, 1, "tables"),
]

SAMPLER_CASES = [(7.5, (0.0, 1.0), 0.0), (7.5, (0.6, 1.0), 0.5), (1.0, (0.0, 1.0), 0.0),
                 (0.0, (0.0, 1.0), 0.0)]
# The dense model: the same (rescale_t 3), plus the released sparse-structure settings
# (rescale_t 5, interval [0.6, 1], rescale 0.7) over 4 steps.
DENSE_SAMPLER_CASES = [c + (3.0,) for c in SAMPLER_CASES] + [(7.5, (0.6, 1.0), 0.7, 5.0)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trellis2", required=True, help="root of a TRELLIS.2 checkout")
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", choices=("slat", "dense"), default=None,
                   help="run only the SLat or only the dense configs (default: both)")
    a = p.parse_args()
    install_stand_ins(a.trellis2)
    Orig = importlib.import_module("trellis2.models.structured_latent_flow").SLatFlowModel
    SparseTensor = importlib.import_module("trellis2.modules.sparse").SparseTensor
    Sampler = importlib.import_module(
        "trellis2.pipelines.samplers").FlowEulerGuidanceIntervalSampler
    dev = torch.device(a.device)
    passed = failed = 0

    def check(label, mine, theirs):
        nonlocal passed, failed
        if mine.is_complex():       # the RoPE tables: compare (re, im) bit patterns
            mine, theirs = torch.view_as_real(mine), torch.view_as_real(theirs)
        same = torch.equal(mine.view(torch.int32), theirs.view(torch.int32))
        diff = float((mine - theirs).abs().max())
        print(f"{'PASS' if same else 'FAIL'} {label}: bitwise {same}, max abs {diff:.3e}")
        passed, failed = passed + same, failed + (not same)

    for label, overrides, counts, concat in (VARIANTS if a.only != "dense" else []):
        args = {**fixtures.TINY_ARGS, **overrides}
        cfg = ModelConfig.from_args(args)
        state = fixtures.random_state_dict(cfg, seed=11)
        mine = SLatFlowModel.from_state_dict(cfg, state, dev)
        orig = Orig(**args)
        missing, unexpected = orig.load_state_dict(state, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        orig = orig.to(dev).eval()
        coords = []
        for b, T in enumerate(counts):
            c = fixtures.random_coords(50 + b, T, cfg.resolution)
            c[:, 0] = b
            coords.append(c)
        coords = torch.cat(coords).to(dev)
        B, T = len(counts), coords.shape[0]
        x = torch.from_numpy(io_formats.normal_tensor(5, (T, cfg.out_channels))).to(dev)
        cond = torch.stack([fixtures.random_cond(60 + b, 16, cfg.cond_channels)
                            for b in range(B)]).to(dev)
        cc = (torch.from_numpy(io_formats.normal_tensor(6, (T, concat))).to(dev)
              if concat else None)
        extra = {"concat_cond": SparseTensor(feats=cc, coords=coords)} if concat else {}
        t = torch.tensor([750.0] * B, device=dev)
        with torch.no_grad():
            v_mine = mine(x, t, cond, mine.prepare_layout(coords, B), cc)
            v_orig = orig(SparseTensor(feats=x, coords=coords), t, cond, **extra).feats
        check(f"{label}: forward", v_mine, v_orig)
        for g, interval, rescale in SAMPLER_CASES:
            s = oracle_sampler.SamplerSettings(steps=4, rescale_t=3.0, guidance_strength=g,
                                               guidance_interval=interval,
                                               guidance_rescale=rescale)
            r = oracle_sampler.sample(mine, x, coords, cond, cc, s, progress=None)
            with torch.no_grad():
                o = Sampler(sigma_min=1e-5).sample(
                    orig, SparseTensor(feats=x, coords=coords), cond=cond,
                    neg_cond=torch.zeros_like(cond), steps=4, rescale_t=3.0,
                    guidance_strength=g, guidance_interval=interval,
                    guidance_rescale=rescale, verbose=False, **extra)
            check(f"{label}: sample g={g} interval={interval} rescale={rescale}",
                  r["latent"], o.samples.feats)
    DenseOrig = importlib.import_module(
        "trellis2.models.sparse_structure_flow").SparseStructureFlowModel
    for label, overrides, B, what in (DENSE_VARIANTS if a.only != "slat" else []):
        args = {**fixtures.TINY_SS_ARGS, **overrides}
        cfg = dense.config_from_args(args)
        R = cfg.resolution
        state = fixtures.random_state_dict(cfg, seed=13, fast=cfg.model_channels > 256)
        mine = dense.SparseStructureFlowModel.from_state_dict(cfg, state, dev)
        orig = DenseOrig(**args)
        missing, unexpected = orig.load_state_dict(state, strict=False)
        table = "rope_phases" if cfg.pe_mode == "rope" else "pos_emb"
        assert missing == [table] and not unexpected, (missing, unexpected)
        orig = orig.to(dev).eval()
        check(f"{label}: {table} table", getattr(mine, table), getattr(orig, table))
        # The original's own state dict (the buffer included) loads into the oracle.
        again = dense.SparseStructureFlowModel.from_state_dict(
            cfg, {k: v.cpu() for k, v in orig.state_dict().items()}, dev)
        check(f"{label}: {table} from the original's state dict", getattr(again, table),
              getattr(orig, table))
        del again
        if what == "tables":
            continue
        T = B * R ** 3
        x = torch.from_numpy(io_formats.normal_tensor(5, (T, cfg.out_channels))).to(dev)
        xv = dense.tokens_to_volume(x, R)
        coords = dense.dense_coords(B, R, dev)
        cond = torch.stack([fixtures.random_cond(60 + b, 16, cfg.cond_channels)
                            for b in range(B)]).to(dev)
        t = torch.tensor([750.0] * B, device=dev)
        with torch.no_grad():
            v_mine = mine(x, t, cond, mine.prepare_layout(coords, B))
            v_orig = orig(xv, t, cond)
        check(f"{label}: forward", dense.tokens_to_volume(v_mine, R), v_orig)
        for g, interval, rescale, rescale_t in DENSE_SAMPLER_CASES:
            s = oracle_sampler.SamplerSettings(steps=4, rescale_t=rescale_t, guidance_strength=g,
                                               guidance_interval=interval,
                                               guidance_rescale=rescale)
            r = oracle_sampler.sample(mine, x, coords, cond, None, s, progress=None)
            with torch.no_grad():
                o = Sampler(sigma_min=1e-5).sample(
                    orig, xv, cond=cond, neg_cond=torch.zeros_like(cond), steps=4,
                    rescale_t=rescale_t, guidance_strength=g, guidance_interval=interval,
                    guidance_rescale=rescale, verbose=False)
            check(f"{label}: sample g={g} interval={interval} rescale={rescale} "
                  f"rescale_t={rescale_t}", dense.tokens_to_volume(r["latent"], R), o.samples)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
