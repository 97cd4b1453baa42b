"""Flow-matching Euler sampler with classifier-free guidance, as TRELLIS.2's
FlowEulerGuidanceIntervalSampler (pipelines/samplers/*.py) computes it, for the SLat
models (model.py) and the dense sparse-structure model (dense.py).

Scalars follow the original's arithmetic: the schedule is float64 (numpy) turned into
Python floats, and every product of a Python float with an fp32 tensor is an fp32 op
(torch converts the scalar to float). The unconditional branch is a real all-zero
condition through the full cross-attention; there is no learned null embedding.
"""
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

SIGMA_MIN = 1e-5


def timesteps(steps, rescale_t):
    """[t_0 = 1, ..., t_steps = 0] as Python floats: s = linspace(1, 0, steps + 1),
    t = r s / (1 + (r - 1) s), in float64."""
    s = np.linspace(1, 0, steps + 1)
    return (rescale_t * s / (1 + (rescale_t - 1) * s)).tolist()


@dataclass
class SamplerSettings:
    steps: int = 15
    rescale_t: float = 3.0
    guidance_strength: float = 7.5
    guidance_interval: tuple = (0.0, 1.0)
    guidance_rescale: float = 0.0
    cfg_mode: str = "serial"          # "serial": cond then uncond forward; "batched": one 2B pass
    attn_mode: str = "loop"           # "loop" (SDPA per asset) or "varlen"
    sigma_min: float = SIGMA_MIN

    def validate(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, found {self.steps}")
        if self.cfg_mode not in ("serial", "batched"):
            raise ValueError(f"cfg mode {self.cfg_mode!r} must be \"serial\" or \"batched\"")
        if self.attn_mode not in ("loop", "varlen"):
            raise ValueError(f"attention mode {self.attn_mode!r} must be \"loop\" or \"varlen\"")
        if self.guidance_rescale < 0:
            raise ValueError(f"guidance rescale must be >= 0, found {self.guidance_rescale}")


def per_asset_std(x, layout):
    """Population std of each asset's rows [B, 1] as the original's SparseTensor.std over
    dims (1,): per-token channel means, averaged over the asset's tokens by
    segment_reduce, then sqrt(E[x^2] - E[x]^2), all fp32."""
    lengths = torch.tensor([layout.offsets[i + 1] - layout.offsets[i]
                            for i in range(layout.batch_size)], device=x.device)
    mean = torch.segment_reduce(x.mean(dim=1, keepdim=True), "mean", lengths=lengths)
    mean2 = torch.segment_reduce((x ** 2).mean(dim=1, keepdim=True), "mean", lengths=lengths)
    return (mean2 - mean ** 2).sqrt()


def dense_asset_std(x, layout, resolution):
    """Unbiased std of each dense asset [B, 1], as the original's guidance rescale computes
    it on a volume: Tensor.std over every dimension but the batch of the contiguous
    [B, C, R, R, R] tensor (the reduction order follows that layout, so the tokens are
    transposed back to it first)."""
    from dense import tokens_to_volume
    v = tokens_to_volume(x, resolution)
    return v.std(dim=list(range(1, v.ndim)), keepdim=True).reshape(layout.batch_size, 1)


def guidance_std_fn(model):
    """The rescale statistic of the model's family: the unbiased volume std for the dense
    model, per_asset_std (population) for the SLat models."""
    from dense import SparseStructureFlowModel
    if isinstance(model, SparseStructureFlowModel):
        R = model.resolution
        return lambda x, layout: dense_asset_std(x, layout, R)
    return per_asset_std


def pred_to_xstart(x_t, t, v, sigma_min):
    return (1 - sigma_min) * x_t - (sigma_min + (1 - sigma_min) * t) * v


def xstart_to_pred(x_t, t, x0, sigma_min):
    return ((1 - sigma_min) * x_t - x0) / (sigma_min + (1 - sigma_min) * t)


class Denoiser:
    """One request: the model, B assets' packed coordinates and conditions, and the token
    layouts (B assets, and 2B for batched CFG) computed once."""

    def __init__(self, model, coords, cond, concat_cond, settings: SamplerSettings):
        self.model, self.s = model, settings
        self.std = guidance_std_fn(model)
        self.B = cond.shape[0]
        self.cond, self.concat_cond = cond, concat_cond
        self.neg_cond = torch.zeros_like(cond)
        self.layout = model.prepare_layout(coords, self.B)
        self.layout2 = None
        if settings.cfg_mode == "batched":
            second = coords.clone()
            second[:, 0] += self.B      # the same assets again, as assets B..2B-1
            self.layout2 = model.prepare_layout(torch.cat([coords, second]), 2 * self.B)
            self.cond2 = torch.cat([cond, self.neg_cond])
            self.concat2 = (None if concat_cond is None
                            else torch.cat([concat_cond, concat_cond]))

    def forward(self, x, t, cond, layout, concat_cond, batch):
        # The original builds t as torch.tensor([1000 * t] * B, dtype=float32).
        tt = torch.tensor([1000 * t] * batch, dtype=torch.float32, device=x.device)
        return self.model(x, tt, cond, layout, concat_cond, self.s.attn_mode)

    def velocity(self, x, t):
        """(guided velocity, v_cond or None, v_uncond or None) at time t."""
        s = self.s
        lo, hi = s.guidance_interval
        g = s.guidance_strength if lo <= t <= hi else 1
        if g == 1:
            v = self.forward(x, t, self.cond, self.layout, self.concat_cond, self.B)
            return v, v, None
        if g == 0:
            v = self.forward(x, t, self.neg_cond, self.layout, self.concat_cond, self.B)
            return v, None, v
        if s.cfg_mode == "serial":
            v_pos = self.forward(x, t, self.cond, self.layout, self.concat_cond, self.B)
            v_neg = self.forward(x, t, self.neg_cond, self.layout, self.concat_cond, self.B)
        else:
            both = self.forward(torch.cat([x, x]), t, self.cond2, self.layout2, self.concat2,
                                2 * self.B)
            v_pos, v_neg = both[:x.shape[0]], both[x.shape[0]:]
        v = g * v_pos + (1 - g) * v_neg
        if s.guidance_rescale > 0:
            rho, sm = s.guidance_rescale, s.sigma_min
            x0_pos = pred_to_xstart(x, t, v_pos, sm)
            x0_cfg = pred_to_xstart(x, t, v, sm)
            ratio = self.std(x0_pos, self.layout) / self.std(x0_cfg, self.layout)
            x0 = rho * (x0_cfg * ratio[self.layout.batch_index]) + (1 - rho) * x0_cfg
            v = xstart_to_pred(x, t, x0, sm)
        return v, v_pos, v_neg


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def sample(model, noise, coords, cond, concat_cond=None, settings=None,
           progress: Optional[Callable[[str], None]] = print):
    """Runs the Euler loop for one request of B assets.

    noise: fp32 [T, out] (x at t = 1); coords: int32 [T, 4] packed, batch column 0..B-1;
    cond: [B, L, cond_channels]; concat_cond: fp32 [T, Cc] or None (texture models).
    The dense model (dense.SparseStructureFlowModel) takes the same token layout (each
    asset the full grid, dense.dense_coords) and gets its own rescale std
    (guidance_std_fn).
    Returns a dict: "latent" fp32 [T, out]; "x_T", "v_cond" and "v_uncond" (None when
    the first step ran no unconditional branch) of the first step; "step_seconds" and
    "total_seconds" (device-synchronised wall time of the loop).
    """
    s = settings or SamplerSettings()
    s.validate()
    if noise.dtype != torch.float32:
        raise ValueError(f"noise must be float32, found {noise.dtype}")
    device = noise.device
    den = Denoiser(model, coords, cond, concat_cond, s)
    ts = timesteps(s.steps, s.rescale_t)
    x = noise
    out = {"x_T": noise.clone()}
    step_seconds = []
    _sync(device)
    start = time.perf_counter()
    for k in range(s.steps):
        t, t_prev = ts[k], ts[k + 1]
        step_start = time.perf_counter()
        v, v_pos, v_neg = den.velocity(x, t)
        if k == 0:
            out["v_cond"] = None if v_pos is None else v_pos.clone()
            out["v_uncond"] = None if v_neg is None else v_neg.clone()
        x = x - (t - t_prev) * v
        _sync(device)
        now = time.perf_counter()
        step_seconds.append(now - step_start)
        if progress:
            progress(f"step {k + 1}/{s.steps} t={t:.6f} elapsed={now - start:.3f}s")
    out["latent"] = x
    out["step_seconds"] = step_seconds
    out["total_seconds"] = time.perf_counter() - start
    return out
