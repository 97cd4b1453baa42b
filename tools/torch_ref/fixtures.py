"""Small deterministic test inputs for the oracle: a random checkpoint for any config and a
payload manifest with a few assets, drawn from the FORMATS.md noise RNG (weights from
torch.randn instead with --fast-rng, for the release shapes).

The weights follow docs/MODEL.md's "scaled" initialisation, except that the layers the
original zero-initialises (adaLN, out_layer) and all biases get small random values, so
that no branch of the model is invisible to a test. The engine makes its own checkpoints;
these are for the oracle's self-test and for golden files when no engine-made fixture is
at hand.

  python3 tools/torch_ref/fixtures.py --out /tmp/tiny        # tiny.json/.safetensors + manifest.json
  python3 tools/torch_ref/fixtures.py --out /tmp/big --preset shape-1024 --fast-rng \
      --tokens 3664 30227 --cond-tokens 4101

The presets tiny-ss and ss-16 are the dense sparse-structure model (SparseStructureFlowModel,
docs/DENSE_MODEL.md): every asset is the full R^3 grid in raster order (dense.dense_coords),
so --assets N replaces --tokens.

  python3 tools/torch_ref/fixtures.py --out /tmp/tiny-ss --preset tiny-ss
  python3 tools/torch_ref/fixtures.py --out /tmp/ss16 --preset ss-16 --fast-rng --assets 1 \
      --cond-tokens 1029
"""
import argparse
import copy
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dense  # noqa: E402
import io_formats  # noqa: E402
from model import ModelConfig, SLatFlowModel  # noqa: E402

TINY_ARGS = {
    "resolution": 64, "in_channels": 32, "model_channels": 128, "cond_channels": 64,
    "out_channels": 32, "num_blocks": 2, "num_heads": 2, "mlp_ratio": 4.0,
    "pe_mode": "rope", "rope_freq": [1.0, 10000.0], "share_mod": True,
    "qk_rms_norm": True, "qk_rms_norm_cross": True, "initialization": "scaled",
    "dtype": "bfloat16", "use_checkpoint": False,
}


SHAPE_1024_ARGS = {**TINY_ARGS, "model_channels": 1536, "cond_channels": 1024,
                   "num_blocks": 30, "num_heads": 12, "mlp_ratio": 5.3334}
# The dense sparse-structure model: a tiny one, and the released shape (640 tensors).
TINY_SS_ARGS = {
    "resolution": 8, "in_channels": 8, "out_channels": 8, "model_channels": 128,
    "cond_channels": 64, "num_blocks": 2, "num_heads": 2, "mlp_ratio": 4.0,
    "pe_mode": "rope", "share_mod": True, "qk_rms_norm": True, "qk_rms_norm_cross": True,
    "initialization": "scaled", "dtype": "bfloat16", "use_checkpoint": False,
}
SS_16_ARGS = {**TINY_SS_ARGS, "resolution": 16, "model_channels": 1536,
              "cond_channels": 1024, "num_blocks": 30, "num_heads": 12, "mlp_ratio": 5.3334}
PRESETS = {"tiny": TINY_ARGS, "shape-1024": SHAPE_1024_ARGS, "tiny-ss": TINY_SS_ARGS,
           "ss-16": SS_16_ARGS}
# The checkpoint JSON's "name" of each preset (SLatFlowModel unless listed).
PRESET_MODELS = {"tiny-ss": dense.MODEL_NAME, "ss-16": dense.MODEL_NAME}


def config_for(model_name, args, where="checkpoint config"):
    """ModelConfig of a checkpoint's (name, args)."""
    if model_name == dense.MODEL_NAME:
        return dense.config_from_args(args, where)
    return ModelConfig.from_args(args, where)


def _normal(seed, shape, std, mean=0.0, fast=False):
    if fast:    # torch's generator: fast enough for the 1.3B-parameter release shapes
        g = torch.Generator().manual_seed(seed)
        return torch.randn(tuple(shape), generator=g) * std + mean
    return torch.from_numpy(io_formats.normal_tensor(seed, tuple(shape))) * std + mean


def random_state_dict(cfg, seed=7, stored_dtype=torch.bfloat16, fast=False):
    """{name: tensor} for cfg; tensor i uses the RNG stream (seed << 20) + i (with fast,
    torch.randn seeded the same way instead of the FORMATS.md stream)."""
    C, nb = cfg.model_channels, cfg.num_blocks
    shapes = SLatFlowModel.expected_shapes(cfg)
    state = {}
    for i, name in enumerate(sorted(shapes)):
        leaf = name.rsplit(".", 1)[-1]
        if name.startswith("t_embedder."):
            std, mean = 0.02, 0.0
        elif name.endswith("modulation"):                       # per-block offsets
            std, mean = 1.0 / math.sqrt(C), 0.0
        elif "rms_norm.gamma" in name or name.endswith("norm2.weight"):
            std, mean = 0.1, 1.0
        elif leaf == "bias":
            std, mean = 0.02, 0.0
        elif name == "input_layer.weight":
            std, mean = 1.0 / math.sqrt(cfg.in_channels), 0.0
        elif name == "out_layer.weight":
            std, mean = 1.0 / math.sqrt(C), 0.0
        elif ".to_out." in name or ".mlp.2." in name:
            std, mean = 1.0 / math.sqrt(5 * nb * C), 0.0
        else:                                                    # other Linear weights
            std, mean = math.sqrt(2.0 / (5.0 * C)), 0.0
        t = _normal((seed << 20) + i, shapes[name], std, mean, fast)
        state[name] = t.to(stored_dtype)
    return state


def random_coords(seed, tokens, grid):
    """int32 [T, 4]: T distinct cells of a grid^3 grid, sorted by (x, y, z), batch 0."""
    cells = np.zeros(0, dtype=np.int64)
    draw = 0
    while cells.size < tokens:
        idx = np.arange(draw, draw + 2 * tokens, dtype=np.uint64)
        draw += 2 * tokens
        u = io_formats.uniform_at(seed, idx)
        cells = np.unique(np.concatenate([cells, (u * grid ** 3).astype(np.int64)]))
    # Any T of the drawn cells will do; take them spread over the sorted list.
    pick = np.linspace(0, cells.size - 1, tokens).round().astype(np.int64)
    cells = np.unique(cells[pick])
    while cells.size < tokens:       # rounding collisions: fill from the unused cells
        extra = np.setdiff1d(np.arange(grid ** 3), cells)[: tokens - cells.size]
        cells = np.unique(np.concatenate([cells, extra]))
    x, rem = np.divmod(cells, grid * grid)
    y, z = np.divmod(rem, grid)
    coords = np.stack([np.zeros_like(x), x, y, z], axis=1).astype(np.int32)
    return torch.from_numpy(coords)


def random_cond(seed, tokens, channels):
    """Layer-normalised Gaussian tokens [L, C] (as DINOv3's output), fp32."""
    x = _normal(seed, (tokens, channels), 1.0)
    return torch.nn.functional.layer_norm(x, (channels,), eps=1e-6)


def write_fixture(out_dir, args=None, token_counts=(37, 64, 21), cond_tokens=16, seed=7,
                  name="tiny", concat_channels=0, fast=False, model_name="SLatFlowModel",
                  assets=2):
    """Writes NAME.json/.safetensors, manifest.json and one file per asset into out_dir.
    Alternates the condition dtype (BF16, F32, ...) to exercise both. Returns the paths
    (checkpoint json, manifest json). For the dense model (model_name
    "SparseStructureFlowModel") token_counts is not used: `assets` assets, each the full
    R^3 grid in raster order."""
    args = copy.deepcopy(args or TINY_ARGS)
    cfg = config_for(model_name, args)
    is_dense = model_name == dense.MODEL_NAME
    if is_dense and concat_channels:
        raise ValueError("the dense model takes no concat_cond")
    os.makedirs(out_dir, exist_ok=True)
    ckpt = os.path.join(out_dir, f"{name}.json")
    io_formats.write_checkpoint(ckpt, args, random_state_dict(cfg, seed, fast=fast),
                                model_name)
    grid = cfg.resolution
    if is_dense:
        token_counts = [grid ** 3] * assets
    entries = []
    for i, T in enumerate(token_counts):
        asset = f"a{i:02d}-grid-{grid}" if is_dense else f"a{i:02d}-random-{T}"
        coords = dense.dense_coords(1, grid) if is_dense else random_coords(1000 + i, T, grid)
        cond = random_cond(2000 + i, cond_tokens, cfg.cond_channels)
        if i % 2 == 0:
            cond = cond.to(torch.bfloat16)
        concat = _normal(3000 + i, (T, concat_channels), 1.0) if concat_channels else None
        io_formats.write_asset(os.path.join(out_dir, f"{asset}.safetensors"), coords, cond, concat)
        entries.append({"name": asset, "file": f"{asset}.safetensors", "tokens": T,
                        "noise_seed": 1001 + i, "set": "default"})
    manifest = {"format": "sparse3d-payload-manifest", "version": 1, "grid": grid,
                "cond_tokens": cond_tokens, "cond_channels": cfg.cond_channels,
                "concat_channels": concat_channels, "assets": entries}
    man = os.path.join(out_dir, "manifest.json")
    io_formats.write_manifest(man, manifest)
    return ckpt, man


def main():
    p = argparse.ArgumentParser(description="write a random checkpoint and payload")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--tokens", type=int, nargs="+", default=None,
                   help="token count of each asset (SLat presets; default 37 64 21)")
    p.add_argument("--assets", type=int, default=2,
                   help="number of assets (dense presets tiny-ss, ss-16: each the full grid)")
    p.add_argument("--cond-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--fast-rng", action="store_true",
                   help="weights from torch.randn (the FORMATS.md stream takes minutes for "
                        "shape-1024)")
    a = p.parse_args()
    model_name = PRESET_MODELS.get(a.preset, "SLatFlowModel")
    if model_name == dense.MODEL_NAME and a.tokens is not None:
        p.error(f"--tokens does not apply to the dense preset {a.preset} (every asset is the "
                "full grid); use --assets")
    if a.assets < 1:
        p.error("--assets must be >= 1")
    ckpt, man = write_fixture(a.out, args=PRESETS[a.preset],
                              token_counts=a.tokens or [37, 64, 21],
                              cond_tokens=a.cond_tokens, seed=a.seed, name=a.preset,
                              fast=a.fast_rng, model_name=model_name, assets=a.assets)
    print(f"wrote {ckpt} and {man}")


if __name__ == "__main__":
    main()
