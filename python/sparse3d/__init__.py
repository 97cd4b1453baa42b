"""sparse3d: a CUDA inference engine for sparse-voxel 3D generative transformers (TRELLIS.2's
structured-latent flow models), from Python.

    import sparse3d
    engine = sparse3d.Engine("ckpts/slat_flow_img2shape_dit_1_3B_1024.json")
    latent = engine.sample(coords, cond, noise=noise)       # the whole denoise loop
    v = engine(x_t, t, cond, coords=coords)                  # one denoiser call

Tensors are any DLPack producer (torch, CuPy, JAX, NumPy), used in place; results come back
in the framework of the inputs (a view of the engine's memory, no copy). docs/PYTHON.md has
the whole API; `sparse3d.trellis2.accelerate(pipeline)` is the TRELLIS.2 drop-in.
"""
import dataclasses
import json
import sys

from . import _loader

_loader.preload()
try:
    from . import _native
except ImportError as e:  # pragma: no cover - depends on the machine
    raise _loader.explain(e) from e

Error = _native.Error
__version__ = _native.version()

__all__ = ["Engine", "Error", "SamplerSettings", "default_path", "paths", "flags", "draw_noise",
           "timesteps", "__version__"]

# cudaStreamLegacy: what a framework's "default stream" handle 0 means; the engine runs such
# work on its own stream, ordered by events (docs/PYTHON.md, "Streams").
_CUDA_STREAM_LEGACY = 1


@dataclasses.dataclass
class SamplerSettings:
    """TRELLIS.2's FlowEulerGuidanceIntervalSampler settings. `released()` (the default) is
    the released shape model's pipeline.json; `protocol()` the benchmark's (15 steps, CFG 7.5
    on every step, no rescale)."""
    steps: int = 12
    rescale_t: float = 3.0
    guidance: float = 7.5                 # TRELLIS.2's guidance_strength
    guidance_interval: tuple = (0.6, 1.0)  # CFG only for t in [lo, hi]
    guidance_rescale: float = 0.5
    sigma_min: float = 1e-5

    @classmethod
    def released(cls):
        return cls()

    @classmethod
    def protocol(cls):
        return cls(steps=15, guidance_interval=(0.0, 1.0), guidance_rescale=0.0)

    def _native(self):
        lo, hi = self.guidance_interval
        return {"steps": int(self.steps), "rescale_t": float(self.rescale_t),
                "guidance": float(self.guidance), "interval_lo": float(lo),
                "interval_hi": float(hi), "guidance_rescale": float(self.guidance_rescale),
                "sigma_min": float(self.sigma_min)}


def _sampler(spec):
    if spec is None or spec == "released":
        return SamplerSettings.released()
    if spec == "protocol":
        return SamplerSettings.protocol()
    if isinstance(spec, SamplerSettings):
        return spec
    if isinstance(spec, dict):
        names = {f.name for f in dataclasses.fields(SamplerSettings)}
        unknown = sorted(set(spec) - names)
        if unknown:
            raise Error(f"sampler: unknown setting(s) {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(names))})")
        return SamplerSettings(**spec)
    raise Error(f"sampler must be \"released\", \"protocol\", a dict or a SamplerSettings, "
                f"got {spec!r}")


# ---- Frameworks ------------------------------------------------------------------------------

def _framework(x):
    """'torch', 'numpy', 'cupy', 'jax' or None, from the type's module (importing nothing)."""
    module = type(x).__module__.split(".")[0]
    if module in ("torch", "numpy", "cupy"):
        return module
    if module in ("jax", "jaxlib"):
        return "jax"
    return None


def _as_framework(array, like):
    """The engine's DLPack result as a tensor of `like`'s framework (a view, no copy)."""
    if array is None:
        return None
    kind = _framework(like)
    if kind == "torch":
        return sys.modules["torch"].from_dlpack(array)
    if kind == "numpy":
        return sys.modules["numpy"].from_dlpack(array)
    if kind == "cupy":
        return sys.modules["cupy"].from_dlpack(array)
    if kind == "jax":
        return sys.modules["jax"].dlpack.from_dlpack(array)
    return array


def _float_array(values, like):
    """A float32 array of `values` in `like`'s framework and device (the forward's t)."""
    kind = _framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        return torch.tensor(values, dtype=torch.float32, device=like.device)
    if kind == "cupy":
        return sys.modules["cupy"].asarray(values, dtype="float32")
    import numpy
    return numpy.asarray(values, dtype=numpy.float32)


def _stream(stream, tensors):
    """The CUDA stream handle the request runs on. None: the current stream of the inputs'
    framework (torch, CuPy) when they are on a GPU, else the engine's own stream."""
    if stream is not None:
        if isinstance(stream, int):
            handle = stream
        elif hasattr(stream, "cuda_stream"):   # torch.cuda.Stream
            handle = stream.cuda_stream
        elif hasattr(stream, "ptr"):           # cupy.cuda.Stream
            handle = stream.ptr
        else:
            raise Error(f"stream must be an int handle, a torch.cuda.Stream or a "
                        f"cupy.cuda.Stream, got {type(stream).__name__}")
        return handle or _CUDA_STREAM_LEGACY
    for t in tensors:
        kind = _framework(t)
        if kind == "torch" and t.is_cuda:
            torch = sys.modules["torch"]
            return torch.cuda.current_stream(t.device).cuda_stream or _CUDA_STREAM_LEGACY
        if kind == "cupy":
            cupy = sys.modules["cupy"]
            return cupy.cuda.get_current_stream().ptr or _CUDA_STREAM_LEGACY
    return 0


def _feats(x):
    """A SparseTensor's features (duck typing: `.feats`), or x itself."""
    return x.feats if hasattr(x, "feats") else x


# ---- The engine ------------------------------------------------------------------------------

class Engine:
    """One model loaded once; requests run on it one at a time (see docs/PYTHON.md).

    checkpoint: a TRELLIS.2 NAME.json (NAME.safetensors beside it). path: an execution path
    such as "beyond" (default: the fastest whose contracts hold) or "pure_eager" (the
    reference); "beyond-cuda_graphs" edits one. device: "auto" (the GPU when there is one),
    "cuda" or "cpu". log: a callable receiving start-up lines (qualifications, cache hits).
    """

    def __init__(self, checkpoint, path="", device="auto", device_index=0,
                 max_device_memory_gib=0.0, cache_dir="", persist_qualification=True,
                 qualify_m=(), log=None, _native_engine=None):
        if _native_engine is not None:
            self._e = _native_engine
        else:
            self._e = _native.Engine(str(checkpoint), path=path, device=device,
                                     device_index=device_index,
                                     max_device_memory_gib=max_device_memory_gib,
                                     cache_dir=str(cache_dir),
                                     persist_qualification=persist_qualification,
                                     qualify_m=list(qualify_m), log=log)
        self.last_request = None

    @classmethod
    def from_state_dict(cls, config, state_dict, name="in-memory checkpoint", **options):
        """An engine over weights held in memory (e.g. a torch module's state_dict()).

        config: the checkpoint's NAME.json as a dict or JSON text ({"name": "SLatFlowModel",
        "args": {...}}). state_dict: name -> tensor (bf16 or f32, or f16, converted here to
        f32 exactly; any device). The names, shapes and values are checked as for a file."""
        if isinstance(config, dict):
            config = json.dumps(config)
        tensors = []
        for key, value in state_dict.items():
            if _framework(value) == "torch":
                value = value.detach()
                if value.dtype == sys.modules["torch"].float16:
                    value = value.float()
                value = value.contiguous()
            elif _framework(value) == "numpy" and str(value.dtype) == "float16":
                value = value.astype("float32")
            tensors.append((key, value))
        native = _native.Engine.from_tensors(
            config, tensors, name=name, path=options.pop("path", ""),
            device=options.pop("device", "auto"), device_index=options.pop("device_index", 0),
            max_device_memory_gib=options.pop("max_device_memory_gib", 0.0),
            cache_dir=str(options.pop("cache_dir", "")),
            persist_qualification=options.pop("persist_qualification", True),
            qualify_m=list(options.pop("qualify_m", ())), log=options.pop("log", None))
        if options:
            raise Error(f"Engine.from_state_dict: unknown option(s) {', '.join(sorted(options))}")
        return cls(None, _native_engine=native)

    # -- requests --

    def sample(self, coords, cond, noise=None, seed=None, concat_cond=None, sampler="released",
               callback=None, *, path=None, out=None, stream=None, keep_first_forward=False):
        """The whole denoise loop for the assets packed in `coords` (int32 [T, 4]: batch, x,
        y, z, in batch order), with condition `cond` ([B, L, C], bf16 or f32). `noise` (f32
        [T, out], x at t = 1) or `seed` (the engine's counter-based normal stream) gives the
        start. Returns the latent, f32 [T, out], in the inputs' framework; the request's
        steps and stats are in `self.last_request`.

        callback(step, t, latent) runs after each step with the latent so far (a view valid
        during the call only: clone it to keep it). stream: a CUDA stream (torch, CuPy or an
        int handle) to order the work on; default: the inputs' current stream."""
        coords, cond = _feats(coords), _feats(cond)
        noise, concat_cond = _feats(noise), _feats(concat_cond)
        if noise is None and seed is None:
            raise Error("sample: pass the starting noise or a seed")
        if noise is not None and seed is not None:
            raise Error("sample: pass the starting noise or a seed, not both")
        batch = int(cond.shape[0]) if len(cond.shape) == 3 else 1
        out = self._host_out(coords, out)
        on_step = None
        if callback is not None:
            def on_step(step, t, latent):
                callback(step, t, _as_framework(latent, coords))
        r = self._e.sample(coords, cond, batch, noise=noise, seed=0 if seed is None else int(seed),
                           concat_cond=concat_cond, sampler=_sampler(sampler)._native(),
                           path=path, out=out, callback=on_step,
                           keep_first_forward=keep_first_forward,
                           stream=_stream(stream, (coords, cond, noise)))
        self.last_request = {"steps": r["steps"], "stats": r["stats"],
                             "first_v_cond": _as_framework(r["first_v_cond"], coords),
                             "first_v_uncond": _as_framework(r["first_v_uncond"], coords)}
        return out if out is not None else _as_framework(r["latent"], coords)

    def forward(self, x, t, cond, concat_cond=None, *, coords=None, path=None, out=None,
                stream=None):
        """One denoiser call v = model(x_t, t, cond): TRELLIS.2's SLatFlowModel.forward.

        x: a SparseTensor (anything with .feats and .coords; the result is x.replace(v)) or
        the features f32/bf16 [T, out] with `coords=`. t: 1000 * t per asset ([B]) or one
        number for every asset."""
        sparse = hasattr(x, "feats") and hasattr(x, "coords")
        feats = x.feats if sparse else x
        if coords is None:
            if not sparse:
                raise Error("forward: x has no .coords; pass coords= (int32 [T, 4])")
            coords = x.coords
        cond, concat_cond = _feats(cond), _feats(concat_cond)
        batch = int(cond.shape[0]) if len(cond.shape) == 3 else 1
        if isinstance(t, (int, float)):
            t = _float_array([float(t)] * batch, feats)
        out = self._host_out(coords, out)
        v = self._e.forward(feats, t, coords, cond, batch, concat_cond=concat_cond, path=path,
                            out=out, stream=_stream(stream, (feats, cond)))
        v = out if out is not None else _as_framework(v, feats)
        return x.replace(v) if sparse and hasattr(x, "replace") else v

    __call__ = forward

    def _host_out(self, like, out):
        """NumPy inputs to a GPU engine: the result is written into a NumPy array (NumPy
        cannot hold device memory); otherwise `out` as given."""
        if out is None and _framework(like) == "numpy" and self.device == "cuda":
            import numpy
            out = numpy.empty((int(like.shape[0]), int(self.model["out_channels"])),
                              dtype=numpy.float32)
        return out

    def warm_up(self, tokens, cond_tokens):
        """Builds what requests of these token counts build on first use (library plans, the
        null-context qualification for condition length `cond_tokens`)."""
        self._e.warm_up([int(n) for n in tokens], int(cond_tokens))

    def fits(self, tokens, batch, cond_tokens, path=None):
        """'' when a sample() of this size fits the device memory, else why not."""
        return self._e.fits(int(tokens), int(batch), int(cond_tokens), path)

    # -- state --

    def counters(self):
        """requests, launches, fallbacks ([{optimization, reason, count}]), memory, and the
        qualification cache's hits and refusals."""
        return self._e.counters()

    def reset_counters(self):
        self._e.reset_counters()

    def fingerprint(self):
        return self._e.fingerprint()

    def qualification(self):
        return self._e.qualification()

    @property
    def model(self):
        return self._e.model

    @property
    def device(self):
        return self._e.device

    @property
    def plan(self):
        return self._e.plan

    def __repr__(self):
        m = self.model
        return (f"sparse3d.Engine({m['checkpoint']!r}, {m['parameters'] / 1e6:.0f}M parameters, "
                f"path {self.plan!r}, on {self.device})")


def default_path():
    return _native.default_path()


def paths():
    """Every execution path: [{name, help, flags}]."""
    return _native.paths()


def flags():
    """Every optimization flag: [{name, help, contract, gpu_validated}]."""
    return _native.flags()


def draw_noise(seed, rows, cols, offset=0):
    """The engine's noise for `seed` (what sample(seed=...) starts from): NumPy f32 [rows, cols]."""
    import numpy
    return numpy.from_dlpack(_native.draw_noise(int(seed), int(rows), int(cols), int(offset)))


def timesteps(sampler="released"):
    """The schedule t_0 = 1 > ... > t_steps = 0."""
    return _native.timesteps(_sampler(sampler)._native())
