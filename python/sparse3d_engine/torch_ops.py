"""The engine's two calls as torch custom ops, so that a module calling the engine compiles
under `torch.compile(..., fullgraph=True)` with no graph break: the compiler sees an op
with known result shapes (a fake implementation), not the engine's Python and C++.

    import sparse3d_engine as s3d
    from sparse3d_engine import torch_ops

    engine = s3d.Engine("ckpts/slat_flow_img2shape_dit_1_3B_1024.json")

    class Denoiser(torch.nn.Module):
        def forward(self, x, t, cond, coords):
            return torch_ops.forward(engine, x, t, cond, coords=coords)

    v = torch.compile(Denoiser(), fullgraph=True)(x, t, cond, coords)

The ops, in the namespace "sparse3d_engine" (torch.ops.sparse3d_engine.*):

* `forward(int engine, Tensor x, Tensor t, Tensor cond, Tensor? coords, Tensor?
  concat_cond, str? path) -> Tensor`: Engine.forward, v of x's shape, float32.
* `sample(int engine, Tensor? coords, Tensor cond, Tensor? noise, int? seed, Tensor?
  concat_cond, int steps, float rescale_t, float guidance, float interval_lo, float
  interval_hi, float guidance_rescale, float sigma_min, str? path, bool? progress, str
  desc, bool make_room, bool release_cache) -> Tensor`: Engine.sample, the latent, float32
  ([T, out] with coords, the volume [B, out, R, R, R] without). The settings' scalars are
  the engine's form of them (_settings._engine_settings: the drop-in passes that dict by
  name). make_room (False): on a GPU, PyTorch's cached blocks go back to the driver first
  when the request would not fit with the engine's flags; release_cache (False): the
  engine's cached blocks go back after the loop (the drop-in's two, inside the one call).

An op's arguments are tensors and numbers, not Python objects: `engine` is the Engine's
`id` (s3d.engine_by_id finds it; the registry is weak, so the caller keeps the engine
alive). Results are on the device of the inputs (coords, else noise, else cond for sample;
x for forward), as the fake implementations say. The ops have no autograd formula (the
engine is for inference). They need torch 2.4 or later (torch.library.custom_op); importing
this module imports torch, which the rest of the package never does.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from . import Engine, Error
from ._args import _INT64, _integer, _optional_text, _real
from ._frameworks import _torch_forward_operands, _torch_sample_operands
from ._registry import engine_by_id
from ._settings import SamplerSpec, _engine_settings, _sampler

if not hasattr(torch.library, "custom_op"):  # pragma: no cover - depends on the torch
    raise ImportError(f"sparse3d_engine.torch_ops needs torch 2.4 or later "
                      f"(torch.library.custom_op); this is torch {torch.__version__}")

NAMESPACE = "sparse3d_engine"

__all__ = ["forward", "sample", "engine_id", "NAMESPACE"]


def _on(result: torch.Tensor, device: torch.device) -> torch.Tensor:
    # The engine answers on its own device; the fake implementations promise the inputs'.
    return result if result.device == device else result.to(device)


# ---- forward ----------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::forward", mutates_args=())
def _forward(engine: int, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor,
             coords: Optional[torch.Tensor] = None, concat_cond: Optional[torch.Tensor] = None,
             path: Optional[str] = None) -> torch.Tensor:
    e = engine_by_id(engine)
    device = x.device
    x, t, cond, concat_cond, coords = _torch_forward_operands(x, t, cond, concat_cond, coords)
    v = e.forward(x, t, cond, concat_cond, coords=coords, path=path)
    return _on(v, device)


@_forward.register_fake
def _forward_fake(engine, x, t, cond, coords=None, concat_cond=None, path=None):
    return x.new_empty(x.shape, dtype=torch.float32)


# ---- sample -----------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::sample", mutates_args=())
def _sample(engine: int, coords: Optional[torch.Tensor], cond: torch.Tensor,
            noise: Optional[torch.Tensor], seed: Optional[int],
            concat_cond: Optional[torch.Tensor], steps: int, rescale_t: float, guidance: float,
            interval_lo: float, interval_hi: float, guidance_rescale: float, sigma_min: float,
            path: Optional[str] = None, progress: Optional[bool] = None,
            desc: str = "Sampling", make_room: bool = False,
            release_cache: bool = False) -> torch.Tensor:
    e = engine_by_id(engine)
    like = next(a for a in (coords, noise, cond) if a is not None)
    room = _empty_cache_of(noise.device) if make_room and noise is not None else None
    coords, noise, cond, concat_cond = _torch_sample_operands(coords, noise, cond, concat_cond)
    # The engine's form of the settings from the op's scalars (the op cannot take an object),
    # checked as SamplerSettings' are; then the one call into the Engine.
    settings = _engine_settings(steps, rescale_t, guidance, (interval_lo, interval_hi),
                                guidance_rescale, sigma_min)
    latent = e._sample(
        coords, cond, noise, seed, concat_cond, path=path,
        progress=(desc if progress else False) if progress is not None else None,
        settings=settings, make_room=room, release_cache=release_cache)
    return _on(latent, like.device)


def _empty_cache_of(device: torch.device):
    """make_room for a request on `device`: PyTorch's cached blocks there (free, but not the
    driver's) go back to the driver, so that the device the request meets is what PyTorch's
    own code would meet, where those blocks serve it. None off a GPU."""
    if device.type != "cuda":
        return None

    def make_room():
        with torch.cuda.device(device):
            torch.cuda.empty_cache()
    return make_room


@_sample.register_fake
def _sample_fake(engine, coords, cond, noise, seed, concat_cond, steps, rescale_t, guidance,
                 interval_lo, interval_hi, guidance_rescale, sigma_min, path=None,
                 progress=None, desc="Sampling", make_room=False, release_cache=False):
    e = engine_by_id(engine)
    channels = int(e.model["out_channels"])
    if coords is not None:
        shape = (coords.shape[0], channels)
        device = coords.device
    elif noise is not None:
        shape = tuple(noise.shape)
        device = noise.device
    else:
        batch = cond.shape[0] if cond.dim() == 3 else 1
        r = int(e.model["resolution"])
        shape = (batch, channels, r, r, r)
        device = cond.device
    return cond.new_empty(shape, dtype=torch.float32, device=device)


# ---- Calling them -------------------------------------------------------------------------------

def engine_id(engine: Union[Engine, int]) -> int:
    """The int the ops take for `engine` (its `id`); an int is returned as it is."""
    if isinstance(engine, Engine):
        return engine.id
    return _integer(engine, "engine (an Engine or its id)", *_INT64)


def forward(engine: Union[Engine, int], x: torch.Tensor, t: Union[float, torch.Tensor],
            cond: torch.Tensor, concat_cond: Optional[torch.Tensor] = None, *,
            coords: Optional[torch.Tensor] = None, path: Optional[str] = None) -> torch.Tensor:
    """Engine.forward through the op `sparse3d_engine::forward`: x the features [T, out]
    with `coords`, or (the dense model) a volume [B, out, R, R, R] without; t 1000·t per
    asset ([B]) or one number. The result is float32, of x's shape."""
    if not isinstance(t, torch.Tensor):
        batch = cond.shape[0] if cond.dim() == 3 else 1
        t = torch.full((batch,), _real(t, "forward: t"), dtype=torch.float32, device=x.device)
    return torch.ops.sparse3d_engine.forward(engine_id(engine), x, t, cond, coords,
                                             concat_cond, _optional_text(path, "forward: path"))


def sample(engine: Union[Engine, int], coords: Optional[torch.Tensor] = None,
           cond: Optional[torch.Tensor] = None, noise: Optional[torch.Tensor] = None,
           seed: Optional[int] = None, concat_cond: Optional[torch.Tensor] = None,
           sampler: SamplerSpec = None, *, path: Optional[str] = None,
           progress: Union[bool, str, None] = None) -> torch.Tensor:
    """Engine.sample through the op `sparse3d_engine::sample` (the same arguments, without
    callback, out, stream and keep_first_forward). sampler None: the released settings of
    the engine's model family, for which `engine` must be an Engine (an int id takes an
    explicit sampler). progress: as Engine.sample's (a string names the bar)."""
    if cond is None:
        raise Error("sample: cond is required ([B, L, cond_channels])")
    default = engine.sampler_preset if isinstance(engine, Engine) else None
    if sampler is None and default is None:
        raise Error("torch_ops.sample: with an engine id, pass sampler= (a preset name, a "
                    "dict or a SamplerSettings)")
    # The settings as Engine.sample takes them: each checked as it is (steps=2.7 is an Error
    # naming it, never 2 steps). Python scalars, checked where torch.compile traces the call.
    s = _sampler(sampler, default or "released")._native()
    # The op's int is torch's int64: a seed past its range is refused here, by name.
    seed = None if seed is None else _integer(seed, "sample: seed", 0, _INT64[1])
    path = _optional_text(path, "sample: path")
    desc = progress if isinstance(progress, str) else "Sampling"
    flag = None if progress is None else bool(progress)
    return torch.ops.sparse3d_engine.sample(
        engine_id(engine), coords, cond, noise, seed, concat_cond, s["steps"], s["rescale_t"],
        s["guidance"], s["interval_lo"], s["interval_hi"], s["guidance_rescale"],
        s["sigma_min"], path, flag, desc)
