"""TRELLIS.2's sampler call in the engine's form: the drop-in's one reading of a
`sampler.sample(model, noise, cond, neg_cond, steps=..., rescale_t=..., guidance_strength=...,
guidance_interval=..., guidance_rescale=..., verbose=..., tqdm_desc=..., concat_cond=...)`
call, its keyword arguments and its framework tensors, into what the engine takes (the
operands, the settings in the engine's form, the bar), or the reason the engine cannot run it
as TRELLIS.2's sampler would. Made once per call (trellis2.EngineSampler.sample). The torch
casts are not made here: the torch op makes them (or, without custom ops,
_frameworks._torch_sample_operands)."""
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, Union

from ._args import _real
from ._frameworks import _feats, _framework, _tensor_like
from ._progress import _pipeline_progress
from ._settings import _engine_settings

# The arguments of TRELLIS.2's flow samplers (named or through **kwargs) the engine's loop
# takes; any other is a reason to run the original sampler.
_TAKEN = frozenset({"model", "noise", "cond", "neg_cond", "steps", "rescale_t",
                    "guidance_strength", "guidance_interval", "guidance_rescale", "verbose",
                    "tqdm_desc", "concat_cond"})


class _SampleCall(NamedTuple):
    """A TRELLIS.2 sampler call in the engine's form (Engine.sample's operands, uncast)."""
    coords: Any                 # the noise's coordinates [T, 4]; None for a dense volume
    noise: Any                  # the noise's features [T, C], or the volume [B, C, R, R, R]
    cond: Any                   # the condition's features [B, L, C]
    concat_cond: Any            # concat_cond's features, or None
    settings: Dict[str, Any]    # the engine's form (_settings._engine_settings)
    progress: Union[str, bool]  # the bar's name, or False: none


def _sample_call(noise: Any, cond: Any, arguments: Mapping[str, Any], grid: bool, family: str,
                 sigma_min: Any) -> Tuple[Optional[str], Optional[_SampleCall]]:
    """(None, the call in the engine's form) or (why the engine cannot run it, None), from
    the call's `noise` and `cond` and its bound `arguments` (inspect.BoundArguments'
    arguments, defaults applied), for a model of `family` (`grid`: its assets are whole
    volumes) and a sampler whose sigma_min is `sigma_min`. A setting of the wrong kind
    (steps=2.7, a str) raises an Error naming it: a reason too, for the caller."""
    why = _operand_refusal(noise, arguments.get("cond"), grid, family)
    if why is not None:
        return why, None
    # Named parameters and **kwargs alike: TRELLIS.2's samplers take some settings
    # (guidance_rescale) through **kwargs, passed on to their guidance mixins.
    a = {k: v for k, v in arguments.items() if k != "kwargs"} | dict(arguments.get("kwargs", {}))
    unknown = sorted(set(a) - _TAKEN)
    if unknown:
        return f"arguments the engine's loop does not take: {', '.join(unknown)}", None
    why, settings = _settings_of(a, sigma_min)
    if why is not None:
        return why, None
    concat = a.get("concat_cond")
    if grid and concat is not None:
        return f"concat_cond given: the {family} takes none", None
    # A bar as TRELLIS.2's samplers show one: verbose (default True) and tqdm_desc.
    desc = a.get("tqdm_desc") or "Sampling"
    progress = desc if a.get("verbose", True) and _pipeline_progress() else False
    return None, _SampleCall(None if grid else noise.coords, noise if grid else noise.feats,
                             _feats(cond), _feats(concat), settings, progress)


def _operand_refusal(noise: Any, cond: Any, grid: bool, family: str) -> Optional[str]:
    """Why the noise or the condition is not what the engine's loop takes, or None."""
    sparse = hasattr(noise, "feats") and hasattr(noise, "coords")
    if grid and sparse:
        return f"the noise is a SparseTensor (the {family} samples a dense volume)"
    if grid and (not hasattr(noise, "shape") or len(noise.shape) != 5):
        return "the noise is not a dense volume [B, C, R, R, R]"
    if not grid and not sparse:
        return "the noise is not a SparseTensor (no .feats/.coords)"
    for what, value in (("the noise", noise if grid else noise.feats),
                        ("the noise's coords", None if grid else noise.coords),
                        ("cond", _feats(cond))):
        if value is not None and not _tensor_like(value):
            return f"{what} is a {type(value).__name__}, not a tensor"
    # Everything else (rows out of batch order, shapes, dtypes) the engine checks itself: its
    # refusal is the fallback's reason.
    return None


def _settings_of(a: Mapping[str, Any],
                 sigma_min: Any) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    """(None, the settings in the engine's form) or (why not, None), from TRELLIS.2's keyword
    arguments `a`: CFG only with a zero negative condition (the engine's CFG uses a zero
    one). Values are taken as they are (no int() of 2.7): a value the engine cannot take
    exactly raises an Error naming it, and the original sampler, which uses it as it is,
    runs instead."""
    neg = a.get("neg_cond")
    g = _real(a.get("guidance_strength", 1.0), "guidance_strength")
    if neg is not None and g != 1.0 and _nonzero(neg):
        return "the negative condition is not zero (the engine's CFG uses a zero one)", None
    if neg is None and g != 1.0:
        return "CFG without a negative condition", None
    if "steps" not in a or "rescale_t" not in a:
        return "the call gives no steps or rescale_t", None
    rescale = a.get("guidance_rescale", 0.0)
    return None, _engine_settings(a["steps"], a["rescale_t"], g,
                                  a.get("guidance_interval", (0.0, 1.0)),
                                  0.0 if rescale is None else rescale, sigma_min, prefix="",
                                  guidance_name="guidance_strength")


def _nonzero(x: Any) -> bool:
    """Whether a tensor (or a SparseTensor's features) has a value other than zero."""
    x = _feats(x)
    if _framework(x) == "torch":
        return bool(x.any())
    import numpy
    return bool(numpy.asarray(x).any())
