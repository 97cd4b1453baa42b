"""TRELLIS.2's three denoise stages end to end, the original PyTorch code against the sparse3d
drop-in (`s3d.trellis2.accelerate`), in one process, on the same weights, conditions and
noise: time and peak memory per stage, and how far each stage's final latent moves.

  python3 tools/torch_ref/pipeline_e2e.py --trellis2 .deps/trellis2-src --device cuda \
      --json out/e2e.json                                  # the 1.3B release shapes (H200)
  python3 tools/torch_ref/pipeline_e2e.py --tiny --device cpu --trellis2 /tmp/trellis2-src \
      --skip-sparse3d                                      # the original's path, tiny models
  python3 tools/torch_ref/pipeline_e2e.py --trellis2 .deps/trellis2-src --device cuda \
      --order service [--low-vram]                         # the service order (below)

Two orders. `--order repeated` (the default): per side, each asset (`--assets`) `--warmup`
untimed and `--repeat` timed runs, medians. `--order service`, what a user of a fresh
service waits for: per side, a warm-up asset (`--warmup-tokens`, 2,500 64-grid voxels) once
-- on the PyTorch side the process's first pipeline run, on the sparse3d side the first run
after accelerate() (engines built, qualifications run) -- then `--repeat` passes over
`--service-tokens` assets (default five, 4,000 to 21,000 tokens at the 1024 stages: gyroids
inside balls of a radius bisected for the count), each asset's first run in pass 1, both
sides in the same order in one process, with a qualification cache folder of its own, empty
(unless `--cache-dir`). The table printed last has per stage and in total PyTorch's and
sparse3d's seconds for the first runs and each asset's pass-1 run, and the geomean speedup.

What runs (pipeline type `1024_cascade`, the default of the released pipeline):

1. structure: `sparse_structure_flow_model` (dense, noise [1, 8, 16, 16, 16]) under
   `sparse_structure_sampler`, condition the 512-px DINOv3 tokens [1, 1029, 1024];
2. shape: `shape_slat_flow_model_512` on the structure's coordinates (32 grid), latent
   denormalised; then `shape_slat_flow_model_1024` on the cascade's 64-grid coordinates with
   the 1024-px tokens [1, 4101, 1024], latent denormalised;
3. texture: `tex_slat_flow_model_1024` with the shape latent re-normalised as concat_cond,
   latent denormalised.

Each sampler is called as the pipeline's stage methods call it (trellis2_image_to_3d.py:
sample_sparse_structure, sample_shape_slat_cascade, sample_tex_slat): `sampler.sample(model,
noise, cond=..., neg_cond=zeros, **params, verbose=True, tqdm_desc=...)`, texture with
`concat_cond=`. That code is not imported (its module needs transformers, torchvision, cumesh,
flex_gemm ...): the stage methods below are written from it, in the same order.

What is synthetic, and replaces what:

* Weights: every parameter of the original modules drawn at random (torch.randn on the
  device, per-tensor scales below) with the released shapes: the config JSONs of
  `configs/gen/*.json` in the checkout, plus `"dtype": "bfloat16"` as the released JSONs
  have. The modules are built on the CPU as `from_pretrained` builds them (so the dense
  model's RoPE table is the host's), then moved to the device and given the random state
  dict with `load_state_dict(strict=False)`.
* Conditions: layer-normalised Gaussian tokens of DINOv3's shapes, the negative condition a
  zero tensor (as `get_cond`); latent normalisation: random mean/std vectors.
* The structure decoder (not run): a deterministic occupancy at 64^3, the voxels that the
  surface of an implicit shape crosses (a torus for the small asset, a gyroid cut by a ball
  for the large one), then exactly the pipeline's reduction to the 32 grid (max-pool 2 > 0.5,
  argwhere, lexicographic order).
* The shape decoder's upsampling in the cascade (not run): the 64-grid coordinates are the
  occupied 64^3 voxels above, i.e. the children of each 32-grid voxel that the surface
  crosses (between 1 and 8 of its 8 children), sorted as the pipeline's `unique(dim=0)`
  sorts them.
* Neither decoder nor the image encoder is timed; a stage's time is its noise draw, the
  sampler call and the (de)normalisation, between torch.cuda.synchronize() calls.

Both sides draw the same noise (a seeded CPU generator per asset and stage, moved to the
device as the pipeline does). The texture stage of each side takes that side's own shape
latent, so its relative L2 includes what the shape stage passed on.

The original's attention without its packages: a `flash_attn` stand-in whose varlen entry
points are PyTorch's own flash-attention kernel (torch.ops.aten._flash_attention_forward with
cu_seqlens: one kernel per call, no per-asset loop) on CUDA, and per-asset SDPA on the CPU;
the dense model runs the original's own `sdpa` backend (ATTN_BACKEND=sdpa). tqdm and easydict
get stand-ins when absent. The JSON lists which stand-ins were used.

The sparse3d side: `s3d.trellis2.accelerate()` on the same pipeline object, after the
PyTorch side; the originals of the accelerated models move to the CPU (the engines are built
from their state dicts), so each side's device memory is its own. A model that accelerate()
does not serve (skipped, or not in its FLOW_MODELS) runs on PyTorch on both sides: the script
says so before and after the run, and marks the stage in the table.

Memory per stage (peaks reset at the start of each stage): torch.cuda.max_memory_allocated /
max_memory_reserved on both sides (the PyTorch side's includes every resident model), plus on
the sparse3d side the engines' own allocators (Engine.reset_counters() at the stage start,
counters()["peak_device_bytes"] / ["device_bytes_reserved"] at its end, summed over the
engines alive). `--low-vram` moves each model to the device before its stage and back after,
as the pipeline's low_vram mode (its default), inside the timed region.
"""
import argparse
import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import types

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compact_json  # noqa: E402  (tools/: the bench results' JSON layout)

# pipeline.models key -> (configs/gen file, original class). The checkout has no JSON for the
# 1024 models; its "_ft1024" training configs are what they were fine-tuned from.
MODEL_FILES = {
    "sparse_structure_flow_model":
        ("ss_flow_img_dit_1_3B_64_bf16.json", "SparseStructureFlowModel"),
    "shape_slat_flow_model_512":
        ("slat_flow_img2shape_dit_1_3B_512_bf16.json", "SLatFlowModel"),
    "shape_slat_flow_model_1024":
        ("slat_flow_img2shape_dit_1_3B_512_bf16_ft1024.json", "SLatFlowModel"),
    "tex_slat_flow_model_512":
        ("slat_flow_imgshape2tex_dit_1_3B_512_bf16.json", "SLatFlowModel"),
    "tex_slat_flow_model_1024":
        ("slat_flow_imgshape2tex_dit_1_3B_512_bf16_ft1024.json", "SLatFlowModel"),
}
# The models 1024_cascade runs (tex_slat_flow_model_512 is only built: accelerate() sees all five).
USED_MODELS = ("sparse_structure_flow_model", "shape_slat_flow_model_512",
               "shape_slat_flow_model_1024", "tex_slat_flow_model_1024")

# The samplers: FlowEulerGuidanceIntervalSampler(sigma_min=1e-5) for all three (pipeline.json
# "args", copied: docs/DENSE_MODEL.md "Sampler and parameters").
SIGMA_MIN = 1e-5
SAMPLER_PARAMS = {
    # docs/DENSE_MODEL.md "Sampler and parameters": the released pipeline.json (several
    # independent copies agree); app.py's UI defaults agree on steps 12, strength 7.5,
    # rescale 0.7, rescale_t 5.0 (the interval is only in pipeline.json).
    "sparse_structure_sampler_params": {"steps": 12, "guidance_strength": 7.5,
                                        "guidance_rescale": 0.7, "guidance_interval": [0.6, 1.0],
                                        "rescale_t": 5.0},
    # README.md / docs/PYTHON.md "released" sampler (pipeline.json, copied); app.py's UI
    # defaults agree: steps 12, strength 7.5, rescale 0.5, rescale_t 3.0.
    "shape_slat_sampler_params": {"steps": 12, "guidance_strength": 7.5,
                                  "guidance_rescale": 0.5, "guidance_interval": [0.6, 1.0],
                                  "rescale_t": 3.0},
    # app.py's UI defaults (tex_slat_*): steps 12, strength 1.0, rescale 0.0, rescale_t 3.0;
    # the interval [0.6, 0.9] from third-party copies of pipeline.json (inert: at strength 1
    # the sampler runs the conditional branch only, whatever the interval).
    "tex_slat_sampler_params": {"steps": 12, "guidance_strength": 1.0,
                                "guidance_rescale": 0.0, "guidance_interval": [0.6, 0.9],
                                "rescale_t": 3.0},
}
SAMPLER_OF = {"sparse_structure_sampler_params": "sparse_structure_sampler",
              "shape_slat_sampler_params": "shape_slat_sampler",
              "tex_slat_sampler_params": "tex_slat_sampler"}

# DINOv3 ViT-L/16 tokens: 1 class + 4 registers + (px / 16)^2 patches, 1024 channels.
COND_TOKENS = {512: 1 + 4 + 32 * 32, 1024: 1 + 4 + 64 * 64}
COND_CHANNELS = 1024

# Tiny mode: the same configs, narrow and shallow, and short conditions (a CPU check).
TINY_OVERRIDES = {"model_channels": 32, "num_blocks": 2, "num_heads": 1, "cond_channels": 16}
TINY_COND_TOKENS = {512: 1 + 4 + 4 * 4, 1024: 1 + 4 + 8 * 8}

# Stages, in run order: (name, model key, sampler attribute).
STAGES = (("structure", "sparse_structure_flow_model", "sparse_structure_sampler"),
          ("shape_512", "shape_slat_flow_model_512", "shape_slat_sampler"),
          ("shape_1024", "shape_slat_flow_model_1024", "shape_slat_sampler"),
          ("texture", "tex_slat_flow_model_1024", "tex_slat_sampler"))

GIB = float(1 << 30)


# ---------------------------------------------------------------------------------------
# Importing the original
# ---------------------------------------------------------------------------------------

def _varlen_sdpa_loop(q, k, v, cu_q, cu_k):
    """Per-asset SDPA over packed [T, H, D] rows (the CPU stand-in): check_original's."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_original import _sdpa_segments
    return _sdpa_segments(q, k, v, cu_q, cu_k)


def varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k):
    """flash_attn_varlen_func's contract (q [Tq, H, D], k/v [Tk, H, D], int32 cumulative
    lengths, scale 1/sqrt(D), no dropout, not causal) on PyTorch's flash kernel."""
    if q.is_cuda:
        return torch.ops.aten._flash_attention_forward(
            q, k, v, cu_q, cu_k, int(max_q), int(max_k), 0.0, False, False)[0]
    return _varlen_sdpa_loop(q, k, v, cu_q, cu_k)


def check_varlen(device):
    """The stand-in's kernel against per-asset SDPA on packed [T, 3, H, D] rows (two assets),
    as the original's self-attention calls it: {"max_abs_diff", "kernel"}."""
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(300, 3, 4, 64, generator=g).to(device=device, dtype=torch.bfloat16)
    cu = torch.tensor([0, 113, 300], dtype=torch.int32, device=device)
    q, k, v = qkv.unbind(1)
    ref = _varlen_sdpa_loop(q, k, v, cu, cu)
    out = varlen_attention(q, k, v, cu, cu, 187, 187)
    kernel = ("torch.ops.aten._flash_attention_forward" if q.is_cuda
              else "per-asset SDPA (CPU)")
    return {"kernel": kernel, "max_abs_diff": float((out.float() - ref.float()).abs().max())}


class _NoBar:
    """tqdm's surface as the sampler and sparse3d use it, doing nothing."""

    def __init__(self, iterable=None, *args, **kwargs):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _EasyDict(dict):
    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as e:
            raise AttributeError(key) from e

    def __setattr__(self, key, value):
        self[key] = value


def install_stand_ins(root):
    """Makes `import trellis2...` work from a bare checkout: a bare `trellis2` package (its
    __init__ imports renderers and pipelines needing packages we do not have), a flash_attn
    stand-in for the sparse attention, the sdpa backend for the dense attention, and tqdm /
    easydict when they are missing. Returns what was substituted."""
    used = []
    if not os.path.isdir(os.path.join(root, "trellis2", "models")):
        raise SystemExit(f"--trellis2 {root}: no trellis2/models there (a TRELLIS.2 checkout?)")
    if importlib.util.find_spec("flash_attn") is None:
        fa = types.ModuleType("flash_attn")
        fa.flash_attn_varlen_qkvpacked_func = \
            lambda qkv, cu, max_len: varlen_attention(*qkv.unbind(1), cu, cu, max_len, max_len)
        fa.flash_attn_varlen_kvpacked_func = \
            lambda q, kv, cq, ck, mq, mk: varlen_attention(q, *kv.unbind(1), cq, ck, mq, mk)
        fa.flash_attn_varlen_func = \
            lambda q, k, v, cq, ck, mq, mk: varlen_attention(q, k, v, cq, ck, mq, mk)
        sys.modules["flash_attn"] = fa
        used.append("flash_attn (varlen: torch.ops.aten._flash_attention_forward on CUDA, "
                    "per-asset SDPA on the CPU)")
    else:
        used.append("none for flash_attn: the installed flash_attn package runs the sparse "
                    "attention")
    # Sparse attention through flash_attn's varlen API; dense attention through the
    # original's own torch-SDPA backend. Read by the config modules at their import.
    os.environ["SPARSE_ATTN_BACKEND"] = "flash_attn"
    os.environ["ATTN_BACKEND"] = "sdpa"
    if importlib.util.find_spec("tqdm") is None:
        m = types.ModuleType("tqdm")
        m.tqdm = _NoBar
        # A spec, as an imported module has: torch._dynamo's import looks tqdm up by it.
        m.__spec__ = importlib.machinery.ModuleSpec("tqdm", None)
        sys.modules["tqdm"] = m
        used.append("tqdm (no progress bars)")
    if importlib.util.find_spec("easydict") is None:
        m = types.ModuleType("easydict")
        m.EasyDict = _EasyDict
        m.__spec__ = importlib.machinery.ModuleSpec("easydict", None)
        sys.modules["easydict"] = m
        used.append("easydict (a dict with attribute access)")
    pkg = types.ModuleType("trellis2")
    pkg.__path__ = [os.path.join(root, "trellis2")]
    sys.modules["trellis2"] = pkg
    return used


def import_original():
    return types.SimpleNamespace(
        SparseStructureFlowModel=importlib.import_module(
            "trellis2.models.sparse_structure_flow").SparseStructureFlowModel,
        SLatFlowModel=importlib.import_module(
            "trellis2.models.structured_latent_flow").SLatFlowModel,
        SparseTensor=importlib.import_module("trellis2.modules.sparse").SparseTensor,
        FlowEulerGuidanceIntervalSampler=importlib.import_module(
            "trellis2.pipelines.samplers").FlowEulerGuidanceIntervalSampler)


# ---------------------------------------------------------------------------------------
# Models with random weights
# ---------------------------------------------------------------------------------------

def model_configs(root, tiny, tex1024_resolution):
    configs = {}
    for key, (fname, cls) in MODEL_FILES.items():
        with open(os.path.join(root, "configs", "gen", fname)) as f:
            args = dict(json.load(f)["models"]["denoiser"]["args"])
        args["dtype"] = "bfloat16"          # as the released checkpoints' JSONs
        if key == "tex_slat_flow_model_1024":
            # The training config says 32 (copied from the 512 one); the model samples on the
            # 64 grid, and sparse3d checks coordinates against `resolution`.
            args["resolution"] = tex1024_resolution
        if tiny:
            args.update(TINY_OVERRIDES)
        configs[key] = {"name": cls, "file": fname, "args": args}
    return configs


@contextlib.contextmanager
def skip_init():
    """The constructors' random initialisation (5 GB of CPU normals per model) is replaced
    by the random state dict loaded right after; parameters are left uninitialised until then."""
    names = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
             "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_")
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch.nn.init, n, fn)


def _scale(name, C, blocks, cin):
    """(std, mean) of parameter `name`: the released 'scaled' initialisation where it is
    random, and small random values where it is zero (adaLN, out_layer, biases) so that
    every branch of the model counts."""
    leaf = name.rsplit(".", 1)[-1]
    if name.startswith("t_embedder."):
        return 0.02, 0.0
    if name.endswith(".modulation"):             # per-block adaLN offsets (share_mod)
        return 0.3, 0.0
    if "rms_norm" in name or (".norm" in name and leaf == "weight"):
        return 0.1, 1.0
    if leaf == "bias":
        return 0.02, 0.0
    if name.startswith("adaLN_modulation."):
        return 0.02, 0.0
    if name == "input_layer.weight":
        return 1.0 / math.sqrt(cin), 0.0
    if name == "out_layer.weight":
        return 1.0 / math.sqrt(C), 0.0
    if ".to_out." in name or ".mlp.2." in name:
        return 1.0 / math.sqrt(5 * blocks * C), 0.0
    return math.sqrt(2.0 / (5.0 * C)), 0.0


def random_state_dict(module, args, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    state = {}
    for name, p in module.named_parameters():
        std, mean = _scale(name, args["model_channels"], args["num_blocks"], args["in_channels"])
        t = torch.empty(p.shape, dtype=p.dtype, device=device)
        t.normal_(mean, std, generator=g)
        state[name] = t
    return state


def build_model(orig, config, seed, device, keep_on_cpu=False):
    cls = getattr(orig, config["name"])
    with skip_init():
        module = cls(**config["args"])      # on the CPU, as from_pretrained builds it
    module = module.to(device)
    state = random_state_dict(module, config["args"], seed, device)
    missing, unexpected = module.load_state_dict(state, strict=False)
    del state
    missing = [m for m in missing if m not in ("rope_phases", "pos_emb")]
    if missing or unexpected:
        raise SystemExit(f"{config['file']}: state dict mismatch: missing {missing}, "
                         f"unexpected {unexpected}")
    if keep_on_cpu:
        module = module.cpu()
    return module.eval()


# ---------------------------------------------------------------------------------------
# Synthetic structure and cascade coordinates
# ---------------------------------------------------------------------------------------

def _torus(major, minor):
    return lambda x, y, z: (np.sqrt(x * x + y * y) - major) ** 2 + z * z - minor * minor


def _gyroid_ball(periods, radius):
    k = 2.0 * np.pi * periods

    def f(x, y, z):
        gyroid = (np.sin(k * x) * np.cos(k * y) + np.sin(k * y) * np.cos(k * z)
                  + np.sin(k * z) * np.cos(k * x))
        return np.maximum(gyroid, np.sqrt(x * x + y * y + z * z) - radius)
    return f


# name -> (implicit function on [-0.5, 0.5]^3, what it is). Tokens at 32 / 64: small 904 /
# 3,856, large 7,291 / 29,728 (printed at run time).
ASSETS = {
    "tiny": (_torus(0.1, 0.04), "torus R 0.1, r 0.04"),
    "small": (_torus(0.2, 0.08), "torus R 0.2, r 0.08"),
    "large": (_gyroid_ball(3.0, 0.45), "gyroid (3 periods) inside a ball of radius 0.45"),
}


def _corners(res):
    g = np.arange(res + 1) / res - 0.5
    return np.meshgrid(g, g, g, indexing="ij")


def surface_occupancy(f, res=64):
    """bool [res]^3: the cells of a res^3 grid over [-0.5, 0.5]^3 whose corners do not all
    have the same sign of f (the cells the surface f = 0 crosses)."""
    return crossed_cells(f(*_corners(res)) > 0)


def crossed_cells(positive):
    """bool [res]^3 from the sign of f at the (res + 1)^3 corners: the cells with corners of
    both signs."""
    res = positive.shape[0] - 1
    any_pos = np.zeros((res,) * 3, dtype=bool)
    any_neg = np.zeros((res,) * 3, dtype=bool)
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                corner = positive[dx:dx + res, dy:dy + res, dz:dz + res]
                any_pos |= corner
                any_neg |= ~corner
    return any_pos & any_neg


def asset_coords(name):
    """(coords at 32 int32 [N32, 4], coords at 64 int32 [N64, 4]), batch 0, lexicographic."""
    return coords_of_occupancy(surface_occupancy(ASSETS[name][0], 64))


def coords_of_occupancy(occ):
    """asset_coords of a bool [64]^3 occupancy."""
    occ64 = torch.from_numpy(occ)[None, None]   # [1, 1, 64^3]
    # The structure decoder's occupancy reduced to the 32 grid as sample_sparse_structure does.
    occ32 = F.max_pool3d(occ64.float(), 2, 2, 0) > 0.5
    coords32 = torch.argwhere(occ32)[:, [0, 2, 3, 4]].int()
    # The cascade's 64-grid coordinates: the occupied children of those voxels.
    coords64 = torch.argwhere(occ64)[:, [0, 2, 3, 4]].int()
    assert torch.equal(torch.unique(coords64[:, 1:] // 2, dim=0), coords32[:, 1:]), \
        "the 64-grid voxels' parents are the 32-grid voxels"
    return coords32, coords64


# The service order's assets: gyroids (3 periods) inside balls whose radius is set, by
# bisection, for a given number of 64-grid voxels (the 1024 stages' tokens): the count grows
# with the radius (about as its cube), so distinct targets give distinct assets.
SERVICE_TOKENS = (4000, 7000, 10500, 15000, 21000)
SERVICE_WARMUP_TOKENS = 2500
TINY_SERVICE_TOKENS = (300, 600, 900, 1200, 1500)
TINY_SERVICE_WARMUP_TOKENS = 200


@functools.lru_cache(maxsize=2)
def _gyroid_and_distance(res, periods):
    x, y, z = _corners(res)
    k = 2.0 * np.pi * periods
    gyroid = (np.sin(k * x) * np.cos(k * y) + np.sin(k * y) * np.cos(k * z)
              + np.sin(k * z) * np.cos(k * x))
    return gyroid, np.sqrt(x * x + y * y + z * z)


def _gyroid_ball_voxels(target, res=64, periods=3.0):
    """(occupancy, radius, shape text) with the voxel count nearest `target` found by 40
    bisection steps on the ball's radius."""
    gyroid, dist = _gyroid_and_distance(res, periods)

    def occ(radius):
        return crossed_cells(np.maximum(gyroid, dist - radius) > 0)
    lo, hi = 0.01, 0.5
    best = None
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        o = occ(mid)
        n = int(o.sum())
        if best is None or abs(n - target) < abs(best[0] - target):
            best = (n, mid, o)
        if n < target:
            lo = mid
        else:
            hi = mid
    n, radius, o = best
    return o, radius, f"gyroid ({periods:g} periods) inside a ball of radius {radius:.4f}"


def service_assets(targets, warmup):
    """{name: asset} in service order: the warm-up asset ("warm-up", `warmup` voxels), then
    one per target, named by its 64-grid token count; distinct counts are required."""
    out = {}
    for label, target in [("warm-up", warmup)] + [(None, t) for t in targets]:
        occ, _, shape = _gyroid_ball_voxels(target)
        c32, c64 = coords_of_occupancy(occ)
        name = label or f"n{c64.shape[0]}"
        counts = [a["coords64"].shape[0] for a in out.values()]
        if name in out or c64.shape[0] in counts:
            raise SystemExit(f"--service-tokens: {target} gives {c64.shape[0]} tokens, as an "
                             "earlier asset does; give distinct, more widely spaced counts")
        out[name] = {"coords32": c32, "coords64": c64, "shape": shape}
    return out


# ---------------------------------------------------------------------------------------
# The pipeline's stages
# ---------------------------------------------------------------------------------------

def _noise(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class StagePipeline:
    """What Trellis2ImageTo3DPipeline holds for its denoise stages (models, samplers, sampler
    parameters, latent normalisations, low_vram, the device), and its stage methods without
    the decoders. accelerate() takes it as it takes the pipeline."""

    def __init__(self, orig, models, device, low_vram, verbose, seed):
        self.SparseTensor = orig.SparseTensor
        self.models = dict(models)
        for params, attr in SAMPLER_OF.items():
            setattr(self, attr, orig.FlowEulerGuidanceIntervalSampler(sigma_min=SIGMA_MIN))
            setattr(self, params, dict(SAMPLER_PARAMS[params]))
        g = torch.Generator().manual_seed(seed)
        self.shape_slat_normalization = {"mean": (torch.randn(32, generator=g)).tolist(),
                                         "std": (2.0 + 4.0 * torch.rand(32, generator=g)).tolist()}
        self.tex_slat_normalization = {"mean": (torch.randn(32, generator=g)).tolist(),
                                       "std": (1.0 + 2.0 * torch.rand(32, generator=g)).tolist()}
        self.device = torch.device(device)
        self.low_vram = low_vram
        self.verbose = verbose

    def _to_device(self, model):
        if self.low_vram:
            model.to(self.device)

    def _release(self, model):
        if self.low_vram:
            model.cpu()

    def _norm(self, which, like):
        n = getattr(self, which)
        return (torch.tensor(n["mean"])[None].to(like.device),
                torch.tensor(n["std"])[None].to(like.device))

    # sample_sparse_structure, without the decoder: returns z_s.
    def structure(self, cond, seed):
        model = self.models["sparse_structure_flow_model"]
        r, c = model.resolution, model.in_channels
        noise = _noise(seed, (1, c, r, r, r)).to(self.device)
        self._to_device(model)
        z_s = self.sparse_structure_sampler.sample(
            model, noise, **cond, **self.sparse_structure_sampler_params,
            verbose=self.verbose, tqdm_desc="Sampling sparse structure").samples
        self._release(model)
        return z_s

    # One shape sampling of sample_shape_slat_cascade: returns (sampler output, denormalised).
    def shape(self, key, cond, coords, seed):
        model = self.models[key]
        noise = self.SparseTensor(feats=_noise(seed, (coords.shape[0], model.in_channels))
                                  .to(self.device), coords=coords)
        self._to_device(model)
        slat = self.shape_slat_sampler.sample(
            model, noise, **cond, **self.shape_slat_sampler_params,
            verbose=self.verbose, tqdm_desc="Sampling shape SLat").samples
        self._release(model)
        mean, std = self._norm("shape_slat_normalization", slat)
        return slat, slat * std + mean

    # sample_tex_slat with model `key`: returns (sampler output, denormalised).
    def texture(self, cond, shape_slat, seed, key="tex_slat_flow_model_1024"):
        model = self.models[key]
        mean, std = self._norm("shape_slat_normalization", shape_slat)
        shape_slat = (shape_slat - mean) / std
        channels = model.in_channels - shape_slat.feats.shape[1]
        noise = shape_slat.replace(feats=_noise(seed, (shape_slat.coords.shape[0], channels))
                                   .to(self.device))
        self._to_device(model)
        slat = self.tex_slat_sampler.sample(
            model, noise, concat_cond=shape_slat, **cond, **self.tex_slat_sampler_params,
            verbose=self.verbose, tqdm_desc="Sampling texture SLat").samples
        self._release(model)
        mean, std = self._norm("tex_slat_normalization", slat)
        return slat, slat * std + mean


# ---------------------------------------------------------------------------------------
# Running a side
# ---------------------------------------------------------------------------------------

class Meter:
    """Stage timing and memory on one side."""

    def __init__(self, device, acc=None):
        self.cuda = torch.device(device).type == "cuda"
        self.acc = acc
        self.engine_fallbacks = {}     # accumulated across reset_counters()

    def _engines(self):
        if self.acc is None:
            return {}
        out = {}
        for name, wrapper in getattr(self.acc, "models", {}).items():
            engine = getattr(wrapper, "_engine", None)
            if engine is not None:
                out[name] = engine
        return out

    def start(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for name, engine in self._engines().items():
            self._keep_fallbacks(name, engine)
            engine.reset_counters()
        return time.perf_counter()

    def _keep_fallbacks(self, name, engine):
        for f in engine.counters().get("fallbacks", []):
            key = (name, f["optimization"], f["reason"])
            self.engine_fallbacks[key] = self.engine_fallbacks.get(key, 0) + f["count"]

    def stop(self, t0):
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        rec = {"seconds": seconds}
        if self.cuda:
            free, total = torch.cuda.mem_get_info()
            rec.update(torch_peak_allocated=torch.cuda.max_memory_allocated(),
                       torch_peak_reserved=torch.cuda.max_memory_reserved(),
                       device_used_after=total - free)
        engines = self._engines()
        if engines:
            peak = reserved = 0
            for engine in engines.values():
                c = engine.counters()
                peak += int(c.get("peak_device_bytes", 0))
                reserved += int(c.get("device_bytes_reserved", 0))
            rec.update(engine_peak_allocated=peak, engine_reserved=reserved,
                       engines_alive=sorted(engines))
        if self.cuda:
            rec["peak_total"] = rec["torch_peak_allocated"] + rec.get("engine_peak_allocated", 0)
        return rec

    def finish(self):
        for name, engine in self._engines().items():
            self._keep_fallbacks(name, engine)
            engine.reset_counters()
        return [{"model": k[0], "optimization": k[1], "reason": k[2], "count": n}
                for k, n in sorted(self.engine_fallbacks.items())]


def _served(acc, model_key, sampler_attr):
    """(sampler loops served, sampler fallbacks, model forwards served, model fallbacks)."""
    if acc is None:
        return (0, 0, 0, 0)
    s = getattr(acc, "samplers", {}).get(sampler_attr)
    m = getattr(acc, "models", {}).get(model_key)
    s_stats, m_stats = getattr(s, "stats", None), getattr(m, "stats", None)
    return (s_stats.calls.get("sample", 0) if s_stats else 0,
            sum(s_stats.fallbacks.values()) if s_stats else 0,
            m_stats.calls.get("forward", 0) if m_stats else 0,
            sum(m_stats.fallbacks.values()) if m_stats else 0)


def _ran_on(acc, model_key, before, after):
    if acc is None:
        return "pytorch"
    if model_key not in getattr(acc, "models", {}):
        return "pytorch (not accelerated)"
    loops, loop_fb, fwd, fwd_fb = (a - b for a, b in zip(after, before))
    if loops and not loop_fb:
        return "engine loop"
    if fwd and not fwd_fb:
        return "engine forwards (original sampler)"
    if fwd_fb and not fwd:
        return "PYTORCH FALLBACK"
    if fwd or loops:
        return "MIXED (some fallbacks)"
    return "unknown (no calls counted)"


def run_once(pl, asset, conds, meter, acc, seed):
    """The three stages once: {stage: record}, {stage: final latent on the CPU}."""
    recs, latents = {}, {}
    # On the device before the clock starts: the decoders that would have made them are not timed.
    c32, c64 = asset["coords32"].to(pl.device), asset["coords64"].to(pl.device)

    def stage(name, model_key, sampler_attr, fn):
        before = _served(acc, model_key, sampler_attr)
        t0 = meter.start()
        out = fn()
        rec = meter.stop(t0)
        rec["ran_on"] = _ran_on(acc, model_key, before, _served(acc, model_key, sampler_attr))
        recs[name] = rec
        return out

    with torch.no_grad():
        z_s = stage("structure", *STAGES[0][1:],
                    lambda: pl.structure(conds[512], seed + 1))
        latents["structure"] = z_s.detach().float().cpu()
        raw512, _ = stage("shape_512", *STAGES[1][1:],
                          lambda: pl.shape("shape_slat_flow_model_512", conds[512], c32,
                                           seed + 2))
        latents["shape_512"] = raw512.feats.detach().float().cpu()
        raw1024, shape_slat = stage("shape_1024", *STAGES[2][1:],
                                    lambda: pl.shape("shape_slat_flow_model_1024", conds[1024],
                                                     c64, seed + 3))
        latents["shape_1024"] = raw1024.feats.detach().float().cpu()
        raw_tex, _ = stage("texture", *STAGES[3][1:],
                           lambda: pl.texture(conds[1024], shape_slat, seed + 4))
        latents["texture"] = raw_tex.feats.detach().float().cpu()
    for key in latents:
        if not torch.isfinite(latents[key]).all():
            print(f"  WARNING: {key} latent has non-finite values", flush=True)
    del z_s, raw512, raw1024, raw_tex, shape_slat
    return recs, latents


def run_side(label, pl, assets, conds, args, acc=None):
    meter = Meter(args.device, acc)
    out = {}
    for name, asset in assets.items():
        seed = args.seed * 1000 + list(ASSETS).index(name) * 10
        runs = []
        for i in range(args.warmup + args.repeat):
            t0 = time.perf_counter()
            recs, latents = run_once(pl, asset, conds, meter, acc, seed)
            wall = time.perf_counter() - t0
            warm = i < args.warmup
            runs.append({"warmup": warm, "wall_seconds": wall, "stages": recs})
            stages = "  ".join(f"{k} {v['seconds']:.3f}s [{v['ran_on']}]" for k, v in recs.items())
            print(f"[{label}] {name} {'warm-up' if warm else 'timed'} run {i}: "
                  f"{wall:.3f} s: {stages}", flush=True)
        stats = {k: {"finite": bool(torch.isfinite(v).all()),
                     "rms": float(v.double().pow(2).mean().sqrt()), "shape": list(v.shape)}
                 for k, v in latents.items()}
        out[name] = {"runs": runs, "latents": latents, "latent_stats": stats}
    fallbacks = meter.finish()
    return out, fallbacks


def run_service_side(label, pl, assets, conds, args, acc=None):
    """The service order on one side: the warm-up asset (the first of `assets`) `args.warmup`
    times, the side's first pipeline runs (on PyTorch the process's first, on sparse3d the
    first after accelerate()), then `args.repeat` passes over the other assets in order, the
    first pass each asset's first run on the side. Returns what run_side returns."""
    meter = Meter(args.device, acc)
    names = list(assets)
    order = [(names[0], True)] * args.warmup + \
        [(n, False) for _ in range(args.repeat) for n in names[1:]]
    out = {n: {"runs": []} for n in names}
    for name, warm in order:
        seed = args.seed * 1000 + names.index(name) * 10
        t0 = time.perf_counter()
        recs, latents = run_once(pl, assets[name], conds, meter, acc, seed)
        wall = time.perf_counter() - t0
        out[name]["runs"].append({"warmup": warm, "wall_seconds": wall, "stages": recs})
        out[name]["latents"] = latents
        stages = "  ".join(f"{k} {v['seconds']:.3f}s [{v['ran_on']}]" for k, v in recs.items())
        kind = "first run (warm-up)" if warm and len(out[name]["runs"]) == 1 else \
            "warm-up" if warm else f"pass {len(out[name]['runs'])}"
        print(f"[{label}] {name} {kind}: {wall:.3f} s: {stages}", flush=True)
    for v in out.values():
        v["latent_stats"] = {k: {"finite": bool(torch.isfinite(t).all()),
                                 "rms": float(t.double().pow(2).mean().sqrt()),
                                 "shape": list(t.shape)} for k, t in v["latents"].items()}
    return out, meter.finish()


def service_firsts(side):
    """{asset: its first run on the side}: the warm-up asset's first warm-up run, every other
    asset's first pass."""
    firsts = {}
    for name, v in side.items():
        runs = v["runs"]
        timed = [r for r in runs if not r["warmup"]]
        firsts[name] = (timed or runs)[0]
    return firsts


def service_rows(result):
    """The service order's table: the first run of each side (PyTorch's first pipeline run of
    the process, sparse3d's first after accelerate()), then each asset's first run, per stage
    and in total (the stages' sum), and the geometric mean of the assets' total speedups."""
    sv = result["service"]
    pt, s3 = sv["pytorch"], sv.get("sparse3d")
    rows = []
    for name in [sv["warmup_asset"]] + sv["order"]:
        a, b = pt[name], (s3 or {}).get(name)
        stages = {st: (a["stages"][st]["seconds"], b["stages"][st]["seconds"] if b else None)
                  for st, *_ in STAGES}
        total_pt = sum(v[0] for v in stages.values())
        total_s3 = sum(v[1] for v in stages.values()) if b else None
        rows.append({"asset": name, "tokens": result["assets"][name]["tokens"]["shape_1024"],
                     "first_run": name == sv["warmup_asset"], "stages": stages,
                     "total_pytorch": total_pt, "total_sparse3d": total_s3,
                     "speedup": total_pt / total_s3 if total_s3 else None})
    speedups = [r["speedup"] for r in rows if not r["first_run"] and r["speedup"]]
    rows.append({"asset": "geomean", "tokens": None, "first_run": False, "stages": None,
                 "total_pytorch": None, "total_sparse3d": None,
                 "speedup": math.exp(statistics.fmean(math.log(v) for v in speedups))
                 if speedups else None})
    return rows


def service_table(rows, title=""):
    def pair(p, q):
        return f"{_fmt_s(p)}/{_fmt_s(q)}"
    head = (f"{'asset':21} {'tokens':>7} " + " ".join(f"{st:>13}" for st, *_ in STAGES)
            + f" {'total':>15} {'speedup':>8}")
    lines = ([title] if title else []) + \
        [head, f"{'':21} {'1024':>7} {'seconds, PyTorch/sparse3d':>55}", "-" * len(head)]
    for r in rows:
        label = f"{r['asset']} (first run)" if r["first_run"] else r["asset"]
        tokens = "" if r["tokens"] is None else str(r["tokens"])
        stages = " ".join(f"{pair(*r['stages'][st]):>13}" if r["stages"] else f"{'':>13}"
                          for st, *_ in STAGES)
        total = pair(r["total_pytorch"], r["total_sparse3d"]) if r["stages"] else ""
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(f"{label:21} {tokens:>7} {stages} {total:>15} {speedup:>8}")
    return "\n".join(lines)


def _median_stage(runs, stage, key):
    vals = [r["stages"][stage].get(key) for r in runs if not r["warmup"]]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def _max_stage(runs, stage, key):
    vals = [r["stages"][stage].get(key) for r in runs if not r["warmup"]]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# ---------------------------------------------------------------------------------------
# sparse3d
# ---------------------------------------------------------------------------------------

def import_sparse3d():
    try:
        import sparse3d_engine as s3d
        import sparse3d_engine.trellis2  # noqa: F401
        return s3d, None
    except Exception as e:  # noqa: BLE001 - any import failure means "no sparse3d side"
        return None, f"{type(e).__name__}: {e}"


def installed_vs_tree(s3d):
    """Whether the imported package's trellis2.py is this tree's (a stale wheel would time an
    older drop-in)."""
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.normpath(os.path.join(here, "..", "..", "python", "sparse3d_engine", "trellis2.py"))
    inst = os.path.join(os.path.dirname(s3d.__file__), "trellis2.py")
    if not os.path.exists(tree):
        return "no python/sparse3d_engine/trellis2.py in this tree to compare with"
    with open(tree, "rb") as f1, open(inst, "rb") as f2:
        same = f1.read() == f2.read()
    return "same as this tree's" if same else \
        (f"DIFFERS from this tree's python/sparse3d_engine/trellis2.py ({inst}): rebuild/reinstall "
         "the wheel")


def acceleration_status(acc, s3d):
    models = {}
    for key in MODEL_FILES:
        if key in acc.models:
            models[key] = "engine"
        elif key in acc.skipped:
            models[key] = f"skipped by accelerate(): {acc.skipped[key]}"
        else:
            models[key] = (f"not attempted: not in this sparse3d's FLOW_MODELS "
                           f"{tuple(getattr(s3d.trellis2, 'FLOW_MODELS', ()))}")
    samplers = {attr: ("wrapped" if attr in acc.samplers else "NOT wrapped (original sampler)")
                for attr in SAMPLER_OF.values()}
    return models, samplers


def loud(lines):
    bar = "!" * 88
    print(bar, flush=True)
    for line in lines:
        print(f"!! {line}", flush=True)
    print(bar, flush=True)


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

def _fmt_s(v):
    return "-" if v is None else f"{v:.3f}"


def _fmt_gib(v):
    return "-" if v is None else f"{v / GIB:.2f}"


def summarise(result):
    rows = []
    for asset, a in result["assets"].items():
        torch_runs = result["sides"]["pytorch"][asset]["runs"]
        s3d = result["sides"].get("sparse3d")
        s3d_runs = s3d[asset]["runs"] if s3d else None
        total_t = total_s = 0.0
        for stage, *_ in STAGES:
            t = _median_stage(torch_runs, stage, "seconds")
            s = _median_stage(s3d_runs, stage, "seconds") if s3d_runs else None
            total_t += t or 0.0
            total_s += s or 0.0
            tokens = a["tokens"][stage]
            rows.append({
                "asset": asset, "stage": stage, "tokens": tokens,
                "pytorch_s": t, "sparse3d_s": s,
                "speedup": (t / s) if (t and s) else None,
                "pytorch_peak": _max_stage(torch_runs, stage, "peak_total"),
                "sparse3d_peak": _max_stage(s3d_runs, stage, "peak_total") if s3d_runs else None,
                "rel_l2": result.get("rel_l2", {}).get(asset, {}).get(stage),
                "ran_on": (s3d_runs[-1]["stages"][stage]["ran_on"] if s3d_runs else "-"),
                "pytorch_first_s": torch_runs[0]["stages"][stage]["seconds"],
                "sparse3d_first_s": s3d_runs[0]["stages"][stage]["seconds"] if s3d_runs else None,
            })
        mine = [r for r in rows if r["asset"] == asset and r["stage"] != "total"]
        rows.append({"asset": asset, "stage": "total", "tokens": None, "pytorch_s": total_t,
                     "sparse3d_s": total_s if s3d_runs else None,
                     "speedup": (total_t / total_s) if (s3d_runs and total_s) else None,
                     "pytorch_peak": max((r["pytorch_peak"] or 0) for r in mine) or None,
                     "sparse3d_peak": max((r["sparse3d_peak"] or 0) for r in mine) or None,
                     "rel_l2": None, "ran_on": ""})
    return rows


def table(rows):
    head = (f"{'asset':6} {'stage':10} {'tokens':>7} {'PyTorch s':>10} {'sparse3d s':>10} "
            f"{'speedup':>8} {'peak GiB pt':>11} {'peak GiB s3d':>12} {'rel L2':>9}  "
            "sparse3d ran on")
    lines = [head, "-" * len(head)]
    for r in rows:
        tokens = "" if r["tokens"] is None else str(r["tokens"])
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        err = "-" if r["rel_l2"] is None else f"{r['rel_l2']:.2e}"
        lines.append(
            f"{r['asset']:6} {r['stage']:10} {tokens:>7} "
            f"{_fmt_s(r['pytorch_s']):>10} {_fmt_s(r['sparse3d_s']):>10} {speedup:>8} "
            f"{_fmt_gib(r['pytorch_peak']):>11} {_fmt_gib(r['sparse3d_peak']):>12} "
            f"{err:>9}  {r['ran_on']}")
    return "\n".join(lines)


def sparse3d_side(s3d, pl, models, assets, conds, torch_side, a, result, problems,
                  runner=None):
    """accelerate() on the pipeline, then the same runs (`runner`: run_side, or
    run_service_side in the service order); fills result and problems."""
    runner = runner or run_side
    print(f"== sparse3d {s3d.__version__} ({s3d.__file__})", flush=True)
    origin = installed_vs_tree(s3d)
    print(f"sparse3d/trellis2.py: {origin}", flush=True)
    result["sparse3d"] = {"version": s3d.__version__, "file": s3d.__file__,
                          "trellis2_py": origin}
    options = {}
    if a.cache_dir:
        options["cache_dir"] = a.cache_dir
    if a.devices:
        options["devices"] = a.devices
        result["sparse3d"]["devices"] = a.devices
    t0 = time.perf_counter()
    acc = s3d.trellis2.accelerate(pl, path=a.path, **options)
    result["sparse3d"]["accelerate_seconds"] = time.perf_counter() - t0
    print(f"accelerate(): {result['sparse3d']['accelerate_seconds']:.2f} s", flush=True)
    status, sampler_status = acceleration_status(acc, s3d)
    result["sparse3d"].update(path=a.path or s3d.default_path(), models=status,
                              samplers=sampler_status)
    for key, s in status.items():
        print(f"  {key}: {s}", flush=True)
    for attr, s in sampler_status.items():
        print(f"  {attr}: {s}", flush=True)
    not_served = [k for k in USED_MODELS if status[k] != "engine"]
    if not_served:
        problems.append(f"{len(not_served)} of the {len(USED_MODELS)} models that 1024_cascade "
                        "runs stay on PyTorch on the sparse3d side (its times are PyTorch's): "
                        + "; ".join(f"{k}: {status[k]}" for k in not_served))
        loud(problems)
    if not (a.low_vram or a.keep_originals_on_device):
        for key in acc.models:
            models[key].cpu()        # the engines hold the weights now
        if torch.device(a.device).type == "cuda":
            torch.cuda.empty_cache()
    side, engine_fallbacks = runner("sparse3d", pl, assets, conds, a, acc)
    result["sides"]["sparse3d"] = {k: {"runs": v["runs"], "latent_stats": v["latent_stats"]}
                                   for k, v in side.items()}
    result["sparse3d"].update(report=acc.report(), fallbacks=acc.fallbacks(),
                              engine_fallbacks=engine_fallbacks)
    result["rel_l2"] = {name: {stage: rel_l2(side[name]["latents"][stage],
                                             torch_side[name]["latents"][stage])
                               for stage, *_ in STAGES}
                        for name in assets}
    print("-- acc.report()", flush=True)
    print(acc.report(), flush=True)
    for f in acc.fallbacks():
        problems.append(f"fallback to PyTorch: {f['where']} ({f['what']}) x{f['count']}: "
                        f"{f['reason']}")
    for name in assets:
        for stage, rec in s3d[name]["runs"][-1]["stages"].items():
            if rec["ran_on"] != "engine loop":
                problems.append(f"{name}/{stage} ran on: {rec['ran_on']}")


def write_outputs(json_path, table_path, result, text=None):
    """The full result as JSON at `json_path` and the table at `table_path` (each when given;
    text None writes no table)."""
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as f:
            compact_json.dump(json.loads(json.dumps(result, default=str)), f)
    if table_path and text is not None:
        with open(table_path, "w") as f:
            f.write(text + "\n")


# ---------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trellis2", required=True, help="root of a TRELLIS.2 checkout")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true",
                   help="tiny configs (width 32, 2 blocks), short conditions, the tiny asset: "
                        "a CPU check")
    p.add_argument("--order", choices=("repeated", "service"), default="repeated",
                   help="repeated: per side, each asset --warmup + --repeat times; service: "
                   "per side, a warm-up asset --warmup times (the side's first run), then "
                   "--repeat passes over the --service-tokens assets in order (the first pass: "
                   "each asset's first run), with a fresh qualification cache unless "
                   "--cache-dir is given")
    p.add_argument("--assets", nargs="+", choices=sorted(ASSETS), default=None,
                   help="--order repeated: default small large (tiny with --tiny)")
    p.add_argument("--service-tokens", type=int, nargs="+", default=None,
                   help="--order service: 64-grid (1024-stage) token counts of the assets, "
                   f"gyroid balls (default {' '.join(map(str, SERVICE_TOKENS))}; with --tiny "
                   f"{' '.join(map(str, TINY_SERVICE_TOKENS))})")
    p.add_argument("--warmup-tokens", type=int, default=None,
                   help="--order service: the warm-up asset's 64-grid token count (default "
                   f"{SERVICE_WARMUP_TOKENS}; {TINY_SERVICE_WARMUP_TOKENS} with --tiny)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed runs per side and asset (default 1; 0 with --tiny); --order "
                   "service: runs of the warm-up asset (default 1, at least 1)")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs per side and asset (median); --order service: passes over "
                   "the assets")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-sparse3d", action="store_true", help="the original side only")
    p.add_argument("--path", default=None, help="sparse3d execution path (default: its fastest)")
    p.add_argument("--cache-dir", default=None, help="sparse3d qualification cache folder")
    p.add_argument("--devices", type=int, nargs="+", default=None,
                   help="sparse3d: the CUDA devices a request may be split over "
                        "(accelerate(devices=...)); the PyTorch side stays on --device")
    p.add_argument("--low-vram", action="store_true",
                   help="move each model to the device for its stage only (pipeline low_vram)")
    p.add_argument("--keep-originals-on-device", action="store_true",
                   help="leave the accelerated models' original modules on the device")
    p.add_argument("--quiet-samplers", action="store_true",
                   help="verbose=False to the samplers (the pipeline passes True)")
    p.add_argument("--tex1024-resolution", type=int, default=64,
                   help="`resolution` of tex_slat_flow_model_1024 (its training config says 32)")
    p.add_argument("--json", default=None, help="write the full result here")
    p.add_argument("--table", default=None, help="write the table here too")
    a = p.parse_args()
    service = a.order == "service"
    assets_wanted = a.assets or (["tiny"] if a.tiny else ["small", "large"])
    if a.warmup is None:
        a.warmup = 0 if a.tiny and not service else 1
    if service:
        a.service_tokens = a.service_tokens or list(TINY_SERVICE_TOKENS if a.tiny
                                                    else SERVICE_TOKENS)
        if a.warmup_tokens is None:
            a.warmup_tokens = TINY_SERVICE_WARMUP_TOKENS if a.tiny else SERVICE_WARMUP_TOKENS
        if a.warmup < 1 or a.repeat < 1:
            raise SystemExit("--order service needs --warmup >= 1 (the first run) and "
                             "--repeat >= 1 (the passes)")
        if a.assets:
            raise SystemExit("--assets names --order repeated's assets; --order service "
                             "takes --service-tokens")
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    t_start = time.perf_counter()

    stand_ins = install_stand_ins(os.path.abspath(a.trellis2))
    orig = import_original()
    varlen = None
    if "flash_attn" in sys.modules and getattr(sys.modules["flash_attn"], "__file__", None) is None:
        varlen = check_varlen(device)
        print(f"varlen stand-in: {varlen['kernel']}, max |diff| vs per-asset SDPA "
              f"{varlen['max_abs_diff']:.2e} (bf16)", flush=True)
        if not varlen["max_abs_diff"] < 0.05:
            raise SystemExit("the varlen attention stand-in disagrees with per-asset SDPA")
    configs = model_configs(a.trellis2, a.tiny, a.tex1024_resolution)

    # sparse3d first: an import failure is known before minutes of set-up.
    s3d, why_not = (None, "--skip-sparse3d") if a.skip_sparse3d else import_sparse3d()
    if s3d is None and not a.skip_sparse3d:
        if a.tiny:
            print(f"sparse3d not importable ({why_not}): the sparse3d side is skipped", flush=True)
        else:
            raise SystemExit(f"sparse3d is not importable: {why_not} (--skip-sparse3d to run "
                             "the original side only)")

    # Inputs.
    if service:
        assets = service_assets(a.service_tokens, a.warmup_tokens)
    else:
        assets = {}
        for name in assets_wanted:
            c32, c64 = asset_coords(name)
            assets[name] = {"coords32": c32, "coords64": c64, "shape": ASSETS[name][1]}
    for name, asset in assets.items():
        c32, c64 = asset["coords32"], asset["coords64"]
        asset["tokens"] = {"structure": 16 ** 3, "shape_512": int(c32.shape[0]),
                           "shape_1024": int(c64.shape[0]), "texture": int(c64.shape[0])}
        print(f"asset {name} ({asset['shape']}): {c32.shape[0]} tokens at 32, "
              f"{c64.shape[0]} at 64", flush=True)
    # The service order measures first runs: a qualification cache of its own, empty.
    scratch_cache = None
    cache_files_at_start = None
    if service and not a.skip_sparse3d:
        if a.cache_dir is None:
            scratch_cache = a.cache_dir = tempfile.mkdtemp(prefix="s3d-e2e-cache-")
        cache_files_at_start = sum(len(f) for _, _, f in os.walk(a.cache_dir))
        if cache_files_at_start:
            print(f"WARNING: --cache-dir {a.cache_dir} holds {cache_files_at_start} files: "
                  "the sparse3d side's first runs may restore qualifications", flush=True)
    cond_channels = TINY_OVERRIDES["cond_channels"] if a.tiny else COND_CHANNELS
    conds = {}
    for px, seed in ((512, 11), (1024, 12)):
        g = torch.Generator().manual_seed(a.seed * 100 + seed)
        tokens = (TINY_COND_TOKENS if a.tiny else COND_TOKENS)[px]
        c = F.layer_norm(torch.randn(1, tokens, cond_channels, generator=g),
                         (cond_channels,), eps=1e-6).to(device)
        conds[px] = {"cond": c, "neg_cond": torch.zeros_like(c)}

    # The original modules with random weights.
    t0 = time.perf_counter()
    models = {}
    for i, (key, config) in enumerate(configs.items()):
        unused = key not in USED_MODELS
        models[key] = build_model(orig, config, a.seed * 100 + i, device,
                                  keep_on_cpu=a.low_vram or unused)
        n = sum(p.numel() for p in models[key].parameters())
        print(f"built {key} ({config['name']}, {config['file']}): {n:,} parameters"
              f"{', kept on the CPU (not run by 1024_cascade)' if unused else ''}", flush=True)
    build_seconds = time.perf_counter() - t0
    pl = StagePipeline(orig, models, device, a.low_vram, not a.quiet_samplers, a.seed)

    result = {
        "what": "TRELLIS.2 1024_cascade denoise stages: original PyTorch vs sparse3d drop-in",
        "environment": {
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "device": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
            "trellis2": os.path.abspath(a.trellis2), "stand_ins": stand_ins,
            "varlen_check": varlen,
            "attention": {"sparse (SLat)": "flash_attn varlen API -> " + (
                "torch.ops.aten._flash_attention_forward" if device.type == "cuda"
                else "per-asset SDPA (CPU)"), "dense": "original's sdpa backend (torch SDPA)"},
        },
        "options": {k: v for k, v in vars(a).items()},
        "models": {k: {"class": c["name"], "config_file": c["file"], "args": c["args"]}
                   for k, c in configs.items()},
        "samplers": {SAMPLER_OF[k]: {"class": "FlowEulerGuidanceIntervalSampler",
                                     "sigma_min": SIGMA_MIN, "params": v}
                     for k, v in SAMPLER_PARAMS.items()},
        "assets": {k: {"shape": v["shape"], "tokens": v["tokens"]} for k, v in assets.items()},
        "cond_tokens": {str(k): v for k, v in
                        (TINY_COND_TOKENS if a.tiny else COND_TOKENS).items()},
        "build_seconds": build_seconds,
        "sides": {},
    }

    # The original side.
    print("== PyTorch (TRELLIS.2's own modules and samplers)", flush=True)
    runner = run_service_side if service else run_side
    torch_side, _ = runner("pytorch", pl, assets, conds, a)
    result["sides"]["pytorch"] = {k: {"runs": v["runs"], "latent_stats": v["latent_stats"]}
                                  for k, v in torch_side.items()}

    # The sparse3d side.
    problems = []
    rc = 0
    if s3d is not None:
        try:
            sparse3d_side(s3d, pl, models, assets, conds, torch_side, a, result, problems,
                          runner)
        except Exception as e:  # noqa: BLE001 - keep the PyTorch side's results
            import traceback
            traceback.print_exc()
            result["sparse3d"] = dict(result.get("sparse3d", {}),
                                      error=f"{type(e).__name__}: {e}")
            result["sides"].pop("sparse3d", None)
            problems.append(f"the sparse3d side FAILED: {type(e).__name__}: {e}")
            rc = 2
    else:
        result["sparse3d"] = {"skipped": why_not}

    for side, per_asset in result["sides"].items():
        for name, rec in per_asset.items():
            for stage, st in rec["latent_stats"].items():
                if not st["finite"]:
                    problems.append(f"{side}: {name}/{stage} latent has NaN or Inf")
    result["problems"] = problems
    result["total_seconds"] = time.perf_counter() - t_start
    rows = summarise(result)
    result["table"] = rows
    text = table(rows)
    if service:
        names = list(assets)
        result["service"] = {
            "warmup_asset": names[0], "order": names[1:], "passes": a.repeat,
            "low_vram": a.low_vram, "cache_dir": a.cache_dir,
            "cache_files_at_start": cache_files_at_start,
            "pytorch": service_firsts(result["sides"]["pytorch"])}
        if "sparse3d" in result["sides"]:
            result["service"]["sparse3d"] = service_firsts(result["sides"]["sparse3d"])
        result["service"]["rows"] = service_rows(result)
        full, text = text, service_table(
            result["service"]["rows"],
            f"service order, low_vram {'on' if a.low_vram else 'off'}: the first run of each "
            "side, then each asset's first run (pass 1)")
        print(full)
        if scratch_cache:
            shutil.rmtree(scratch_cache, ignore_errors=True)
    write_outputs(a.json, a.table, result, text)
    print(f"\nwhole run {result['total_seconds']:.1f} s (models built in {build_seconds:.1f} s)")
    if problems:
        loud(["PROBLEMS (%d):" % len(problems)] + problems)
    if s3d is None:
        print(f"sparse3d side: skipped ({why_not})")
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
