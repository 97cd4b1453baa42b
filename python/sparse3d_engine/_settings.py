"""The sampler's settings: SamplerSettings (TRELLIS.2's FlowEulerGuidanceIntervalSampler
fields), its named presets, and the one reading of a `sampler=` argument."""
import dataclasses
from typing import Any, Dict, Tuple, Union

from . import _native
from ._args import _INT32, _integer, _real
from ._native import Error

# A sampler: a preset name, a dict of SamplerSettings fields, a SamplerSettings, or None.
SamplerSpec = Union[None, str, Dict[str, Any], "SamplerSettings"]


# The engine's presets (SamplerSettings::preset), read once: the values are the engine's, never
# written twice. The fields' defaults are the released shape model's.
_RELEASED = _native.sampler_preset("released")


@dataclasses.dataclass
class SamplerSettings:
    """TRELLIS.2's FlowEulerGuidanceIntervalSampler settings. `released()` is the released
    shape model's pipeline.json (the default of a SLatFlowModel engine);
    `released_sparse_structure()` the released sparse-structure sampler's (the default of a
    SparseStructureFlowModel engine); `protocol()` the benchmark's (15 steps, CFG 7.5 on every
    step, no rescale)."""
    steps: int = _RELEASED["steps"]                        # 12
    rescale_t: float = _RELEASED["rescale_t"]              # 3.0
    guidance: float = _RELEASED["guidance"]                # 7.5, TRELLIS.2's guidance_strength
    guidance_interval: Tuple[float, float] = (_RELEASED["interval_lo"],   # (0.6, 1.0): CFG only
                                              _RELEASED["interval_hi"])   # for t in [lo, hi]
    guidance_rescale: float = _RELEASED["guidance_rescale"]  # 0.5
    sigma_min: float = _RELEASED["sigma_min"]              # 1e-5

    @classmethod
    def _preset(cls, name: str) -> "SamplerSettings":
        d = _native.sampler_preset(name)
        return cls(steps=d["steps"], rescale_t=d["rescale_t"], guidance=d["guidance"],
                   guidance_interval=(d["interval_lo"], d["interval_hi"]),
                   guidance_rescale=d["guidance_rescale"], sigma_min=d["sigma_min"])

    @classmethod
    def released(cls) -> "SamplerSettings":
        return cls._preset("released")

    @classmethod
    def released_sparse_structure(cls) -> "SamplerSettings":
        return cls._preset("released_sparse_structure")

    @classmethod
    def protocol(cls) -> "SamplerSettings":
        return cls._preset("protocol")

    def _native(self) -> Dict[str, Any]:
        """The settings in the engine's form (_engine_settings), each checked as it is."""
        interval = self.guidance_interval
        if isinstance(interval, (str, bytes)) or not hasattr(interval, "__len__") or len(interval) != 2:
            raise Error(f"sampler: guidance_interval must be (lo, hi), got {interval!r}")
        lo, hi = interval
        return _engine_settings(self.steps, self.rescale_t, self.guidance, (lo, hi),
                                self.guidance_rescale, self.sigma_min)


def _engine_settings(steps: Any, rescale_t: Any, guidance: Any, interval: Any,
                     guidance_rescale: Any, sigma_min: Any, *, prefix: str = "sampler: ",
                     guidance_name: str = "guidance") -> Dict[str, Any]:
    """The settings in the engine's form: the dict the native Engine.sample takes, whose keys
    are also the names of the torch op's scalar arguments. Each value is checked as it
    is, in this order (an Error naming it, `prefix` first: never a silent int() of 2.7);
    `interval` is read by index, (lo, hi). The engine checks the values' ranges. Written once
    for its three callers: SamplerSettings, the torch op's scalars, TRELLIS.2's keyword
    arguments (_trellis2_args, whose names have no prefix and call guidance
    guidance_strength)."""
    return {"steps": _integer(steps, prefix + "steps", 1, _INT32[1]),
            "rescale_t": _real(rescale_t, prefix + "rescale_t"),
            "guidance": _real(guidance, prefix + guidance_name),
            "interval_lo": _real(interval[0], prefix + "guidance_interval[0]"),
            "interval_hi": _real(interval[1], prefix + "guidance_interval[1]"),
            "guidance_rescale": _real(guidance_rescale, prefix + "guidance_rescale"),
            "sigma_min": _real(sigma_min, prefix + "sigma_min")}


# Public as sparse3d_engine.SamplerSettings (its repr and pickles name the package).
SamplerSettings.__module__ = "sparse3d_engine"

# SamplerSettings' fields, read once (what torch.compile traces in _sampler() is a tuple).
_SAMPLER_FIELDS = tuple(f.name for f in dataclasses.fields(SamplerSettings))

# Named presets (sampler="..."), by their SamplerSettings constructor.
SAMPLER_PRESETS = ("released", "released_sparse_structure", "protocol")


def _sampler(spec: SamplerSpec, default: str = "released") -> SamplerSettings:
    """SamplerSettings from a preset name, a dict or SamplerSettings; None: the preset
    `default` (a model family's own: Engine.model["sampler_preset"])."""
    if spec is None:
        spec = default
    if isinstance(spec, str) and spec in SAMPLER_PRESETS:
        return getattr(SamplerSettings, spec)()
    if isinstance(spec, SamplerSettings):
        return spec
    if isinstance(spec, dict):
        names = set(_SAMPLER_FIELDS)
        unknown = sorted(str(k) for k in set(spec) - names)
        if unknown:
            raise Error(f"sampler: unknown setting(s) {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(names))})")
        return SamplerSettings(**spec)
    raise Error(f"sampler must be one of {', '.join(repr(p) for p in SAMPLER_PRESETS)}, None (the "
                f"model's released settings), a dict or a SamplerSettings, got {spec!r}")
