"""sparse3d_engine: a CUDA inference engine for TRELLIS.2's flow transformers (the structured-latent
models over sparse voxels and the dense sparse-structure model), from Python.

    import sparse3d_engine as s3d
    engine = s3d.Engine("ckpts/slat_flow_img2shape_dit_1_3B_1024.json")
    latent = engine.sample(coords, cond, noise=noise)       # the whole denoise loop
    v = engine(x_t, t, cond, coords=coords)                  # one denoiser call

    dense = s3d.Engine("ckpts/ss_flow_img_dit_1_3B_64_bf16.json")
    z_s = dense.sample(cond=cond, noise=noise)               # volumes [B, 8, 16, 16, 16]
    v = dense(x_t, t, cond)                                  # x_t a volume, no coords

Tensors are any DLPack producer (torch, CuPy, JAX, NumPy), used in place; results come back
in the framework of the inputs (a view of the engine's memory, no copy). docs/PYTHON.md has
the whole API; `s3d.trellis2.accelerate(pipeline)` is the TRELLIS.2 drop-in;
`s3d.torch_ops` registers the engine's calls as torch custom ops (torch.compile);
`python -m sparse3d_engine` is a command line (info, make-checkpoint, run).

Messages: the engine's fallback lines go to the "sparse3d_engine" logger (WARNING) and to
an engine's `log` callable; start-up lines to the logger at INFO and to `log`. Progress: no
bar unless asked for (`progress=True`, `set_progress(True)` or SPARSE3D_ENGINE_PROGRESS=1):
a bar is a step callback, and on a GPU it makes the loop wait for every step. The drop-in's
samplers show one, as TRELLIS.2's do, when their `verbose` says so and stderr is a terminal.
"""
from __future__ import annotations

import atexit
import json
import logging
import numbers
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from . import _loader

_loader.check_torch()
_loader.preload()
try:
    from . import _native
except ImportError as e:  # pragma: no cover - depends on the machine
    raise _loader.explain(e) from e

Error = _native.Error
__version__: str = _native.version()

# The package is a face over its private modules (each needs _native loaded first): argument
# checks, framework arrays, the sampler's settings, progress bars, the engines by id (and, for
# the drop-in, _trellis2_args: a TRELLIS.2 sampler call in the engine's form). The drop-in
# (trellis2.py) and the torch ops import what they need from those modules, not from here.
from ._args import (_INT32, _INT64, _UINT64, _engine_options, _flag, _integer,  # noqa: E402
                    _optional_text, _real, _text)
from ._frameworks import (_array, _as_framework, _feats, _float_array,  # noqa: E402
                          _framework, _out_array, _stream)
from ._progress import _progress_bar, _sample_hooks, progress_enabled, set_progress  # noqa: E402
from ._registry import _register, _release_engines_at_exit, engine_by_id  # noqa: E402
from ._settings import SAMPLER_PRESETS, SamplerSettings, SamplerSpec, _sampler  # noqa: E402

__all__ = ["Engine", "Workspace", "Error", "SamplerSettings", "SAMPLER_PRESETS", "SLAT", "DENSE", "model_families",
           "default_path", "paths", "flags", "draw_noise", "timesteps", "build_info",
           "engine_by_id", "set_progress", "progress_enabled", "synthetic_presets",
           "make_synthetic_checkpoint", "logger", "__version__"]

# Any DLPack producer: a torch, CuPy or JAX tensor, a NumPy array (or, for latents, a
# SparseTensor: anything with .feats and .coords).
Array = Any

# The package's logger: the engine's messages (fallbacks, WARNING), engines' start-up lines
# (INFO) and the CUDA libraries loaded (INFO; an outdated one is a WARNING).
logger = logging.getLogger("sparse3d_engine")

# ---- Messages ---------------------------------------------------------------------------------
# The C++ side sends its messages (a fast path refused: "fallback: FLAG: REASON") to one
# process-wide sink; the package installs _on_message there, so that nothing is printed by
# the engine itself: the logger decides. A message also goes to the `log` callable of the
# engine whose request sent it (the request's thread names it: _routing).

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING}
_current = threading.local()


def _on_message(level: str, kind: str, text: str, optimization: str, reason: str) -> None:
    logger.log(_LEVELS.get(level, logging.WARNING), "%s: %s", kind, text,
               extra={"kind": kind, "optimization": optimization, "reason": reason})
    user_log = getattr(_current, "log", None)
    if user_log is not None:
        user_log(f"{kind}: {text}")


class _routing:
    """Names the engine's `log` callable as the destination of messages sent on this thread
    during the block (a request runs on the caller's thread)."""
    __slots__ = ("log", "previous")

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.previous = getattr(_current, "log", None)
        _current.log = self.log

    def __exit__(self, *exc):
        _current.log = self.previous
        return False


def _engine_log(user_log):
    """The native engine's start-up log: the package's logger at INFO, then the caller's."""
    def log(line):
        logger.info("%s", line)
        if user_log is not None:
            user_log(line)
    return log


_native.set_message_sink(_on_message)
# Back to stderr before the interpreter goes (a message after that could not take the GIL).
atexit.register(_native.set_message_sink, None)

# ---- Engines by id -----------------------------------------------------------------------------
# Every Engine has a process-unique int, `engine.id`: what the torch custom ops take
# (torch_ops; the registry is _registry.py's, weak). Released at interpreter exit: registered
# after the message sink's reset, so that it runs first.

atexit.register(_release_engines_at_exit)

# The two families of TRELLIS.2 (Engine.model["family"]). The package reads what differs
# between families from the engine's registry (model_families(), Engine.model's "layout" and
# "sampler_preset"), never from these names.
SLAT = "SLatFlowModel"
DENSE = "SparseStructureFlowModel"


def model_families() -> Dict[str, Dict[str, Any]]:
    """The engine's model families by name: {name: {layout, sampler_preset, reads_rope_freq}}.
    layout "tokens": the caller names the voxels (coords [T, 4]); "grid": an asset is the
    whole R^3 grid, and coords=None takes volumes [B, C, R, R, R]."""
    return {f["name"]: f for f in _native.model_families()}



# ---- The engine ------------------------------------------------------------------------------

class Workspace:
    """A device workspace that engines which never run at once share (the flow models of one
    pipeline): one caching allocator for their activations, library workspaces and CUDA-graph
    pools on one GPU, so that what one engine's request freed serves the next engine's, and
    release_cache() gives it all back. Pass it as Engine(..., workspace=ws). Requests of the
    engines sharing it run one at a time, each ending with its device work done; their memory
    counters read the shared allocator. docs/API.md, "Residency".

    memory: where its blocks come from. "driver" (the default): cudaMalloc, and
    release_cache() gives them back to the driver. "torch": PyTorch's caching allocator
    (torch.cuda.caching_allocator_alloc on the current stream), and release_cache() gives them
    back to it, so that PyTorch's next tensors and the next request take them without a
    cudaMalloc (what accelerate() uses: docs/PYTHON.md, "Memory")."""

    def __init__(self, device_index: int = 0, memory: str = "driver"):
        index = _integer(device_index, "device_index", 0, _INT32[1])
        if memory not in ("driver", "torch"):
            raise Error(f"Workspace: memory must be 'driver' or 'torch', got {memory!r}")
        if memory == "torch" and "torch" not in sys.modules:
            try:
                import torch  # noqa: F401  (the source looks it up at each allocation)
            except ImportError as e:
                raise Error("Workspace: memory='torch' needs PyTorch, which cannot be "
                            f"imported ({e})") from None
        self._w = _native.Workspace(index)
        if memory == "torch":
            self._w.use_torch_memory(True)

    @property
    def memory(self) -> str:
        """Where the workspace's new blocks come from: "driver" or "torch"."""
        return "torch" if self._w.memory_source else "driver"

    @property
    def device_index(self) -> int:
        return int(self._w.device_index)

    def release_cache(self) -> int:
        """The cached blocks back to the driver (after a request in flight); bytes released."""
        return int(self._w.release_cache())

    def stats(self) -> Dict[str, int]:
        """{bytes_in_use, bytes_reserved, peak_bytes} of the shared allocator."""
        return dict(self._w.stats())

    def reset_peak(self) -> None:
        self._w.reset_peak()

    def __repr__(self) -> str:
        st = self.stats()
        return (f"Workspace(cuda:{self.device_index}, {st['bytes_in_use'] / 2**30:.2f} GiB in use, "
                f"{st['bytes_reserved'] / 2**30:.2f} GiB reserved, memory={self.memory!r})")


def _workspace(value: Any) -> Any:
    """The native workspace of a `workspace` argument (None: the engine's own allocator)."""
    if value is None:
        return None
    if not isinstance(value, Workspace):
        raise Error(f"workspace must be a sparse3d_engine.Workspace or None, got "
                    f"{type(value).__name__}")
    return value._w


class Engine:
    """One model loaded once; requests run on it one at a time (see docs/PYTHON.md).

    checkpoint: a TRELLIS.2 NAME.json (NAME.safetensors beside it). path: an execution path
    such as "fast" (default: the fastest whose contracts hold) or "pure_eager" (the
    reference); "beyond-cuda_graphs" edits one. device: "auto" (the GPU when there is one),
    "cuda" or "cpu". log: a callable receiving start-up lines (qualifications, cache hits)
    and this engine's fallback lines; both also go to the "sparse3d_engine" logger.
    weight_format: how the linear layers hold their weights, "" (plain: the checkpoint's
    tensors) or "row_scaled" (a test format; docs/API.md); model["weight_format"] says which.
    `id` is a process-unique int naming the engine (the torch custom ops take it).
    """

    id: int
    last_request: Optional[Dict[str, Any]]

    def __init__(self, checkpoint: Union[str, "os.PathLike[str]", None], path: str = "",
                 device: str = "auto", device_index: int = 0,
                 max_device_memory_gib: float = 0.0,
                 cache_dir: Union[str, "os.PathLike[str]"] = "",
                 persist_qualification: bool = True, qualify_m: Sequence[int] = (),
                 log: Optional[Callable[[str], Any]] = None, devices: Sequence[int] = (),
                 parallel_min_tokens: int = 8192, workspace: Optional["Workspace"] = None,
                 fit_to_reference: bool = False, weight_format: str = "",
                 _native_engine: Any = None):
        self._user_log = log
        if _native_engine is not None:
            self._e = _native_engine
        else:
            if log is not None and not callable(log):
                raise Error(f"log must be a callable or None, got {type(log).__name__}")
            options = _engine_options(path, device, device_index, max_device_memory_gib,
                                      cache_dir, persist_qualification, qualify_m, devices,
                                      parallel_min_tokens)
            options["workspace"] = _workspace(workspace)
            options["fit_to_reference"] = _flag(fit_to_reference, "fit_to_reference")
            options["weight_format"] = _text(weight_format, "weight_format")
            checkpoint = _text(checkpoint, "checkpoint", path=True)
            if not checkpoint:
                raise Error("checkpoint must be the path of a NAME.json, got '' (an empty path)")
            with _routing(log):
                self._e = _native.Engine(checkpoint, **options, log=_engine_log(log))
        self.last_request = None
        m = self._e.model
        self._family, self._resolution = m["family"], int(m["resolution"])
        self._grid, self._sampler_preset = m["layout"] == "grid", m["sampler_preset"]
        self._out_channels = int(m["out_channels"])
        self.id = _register(self)

    @classmethod
    def from_state_dict(cls, config: Union[Dict[str, Any], str],
                        state_dict: Dict[str, Array], name: str = "in-memory checkpoint",
                        **options: Any) -> "Engine":
        """An engine over weights held in memory (e.g. a torch module's state_dict()).

        config: the checkpoint's NAME.json as a dict or JSON text ({"name": "SLatFlowModel",
        "args": {...}}). state_dict: name -> tensor (bf16 or f32, or f16, converted here to
        f32 exactly; any device). The names, shapes and values are checked as for a file.

        borrow=True: the engine keeps these tensors as its weights instead of a copy of its
        own, when each already has its run-time dtype (bf16 for the blocks' Linear layers, f32
        for the rest, as TRELLIS.2's modules hold them): on the engine's GPU they are used in
        place; on the host they are the home the engine uploads from and offload() returns to,
        copying nothing (docs/API.md, "Residency"). The engine holds a reference to them; do
        not change their values while it lives. Where they cannot be borrowed the engine
        copies them and says why in its log; residency()["weights_source"] tells which."""
        if isinstance(config, dict):
            try:
                config = json.dumps(config)
            except (TypeError, ValueError) as e:
                raise Error(f"from_state_dict: config is not JSON-serializable ({e})") from None
        elif not isinstance(config, str):
            raise Error(f"from_state_dict: config must be a dict or JSON text (a str), got "
                        f"{type(config).__name__}")
        if not isinstance(state_dict, Mapping):
            raise Error(f"from_state_dict: state_dict must be a mapping of names to arrays "
                        f"(a dict, a module's state_dict()), got {type(state_dict).__name__}")
        tensors = []
        for key, value in state_dict.items():
            if not isinstance(key, str):
                raise Error(f"from_state_dict: state_dict's names must be str, got {key!r} "
                            f"({type(key).__name__})")
            _array(value, f"from_state_dict: state_dict[{key!r}]")
            if _framework(value) == "torch":
                value = value.detach()
                if value.dtype == sys.modules["torch"].float16:
                    value = value.float()
                value = value.contiguous()
            elif _framework(value) == "numpy" and str(value.dtype) == "float16":
                value = value.astype("float32")
            tensors.append((key, value))
        log = options.pop("log", None)
        if log is not None and not callable(log):
            raise Error(f"log must be a callable or None, got {type(log).__name__}")
        kwargs = dict(name=_text(name, "name"), **_engine_options(
            options.pop("path", ""), options.pop("device", "auto"),
            options.pop("device_index", 0), options.pop("max_device_memory_gib", 0.0),
            options.pop("cache_dir", ""), options.pop("persist_qualification", True),
            options.pop("qualify_m", ()), options.pop("devices", ()),
            options.pop("parallel_min_tokens", 8192)))
        kwargs["borrow"] = _flag(options.pop("borrow", False), "borrow")
        kwargs["workspace"] = _workspace(options.pop("workspace", None))
        kwargs["fit_to_reference"] = _flag(options.pop("fit_to_reference", False),
                                           "fit_to_reference")
        kwargs["weight_format"] = _text(options.pop("weight_format", ""), "weight_format")
        if options:
            raise Error(f"Engine.from_state_dict: unknown option(s) {', '.join(sorted(options))}")
        with _routing(log):
            native = _native.Engine.from_tensors(config, tensors, log=_engine_log(log), **kwargs)
        return cls(None, _native_engine=native, log=log)

    # -- requests --

    def sample(self, coords: Optional[Array] = None, cond: Optional[Array] = None,
               noise: Optional[Array] = None, seed: Optional[int] = None,
               concat_cond: Optional[Array] = None, sampler: SamplerSpec = None,
               callback: Optional[Callable[[int, float, Array], Any]] = None, *,
               path: Optional[str] = None, out: Optional[Array] = None,
               stream: Union[int, Any, None] = None, keep_first_forward: bool = False,
               progress: Union[bool, str, None] = None) -> Array:
        """The whole denoise loop. Returns the latent in the inputs' framework; the request's
        steps and stats are in `self.last_request`.

        Token mode (every model): `coords` int32 [T, 4] (batch, x, y, z; assets packed in
        batch order), `noise` f32 [T, out], result f32 [T, out]. For a SparseStructureFlowModel
        the coords are the full R^3 grid of each asset in raster order.
        Volume mode (a SparseStructureFlowModel only): `coords=None`, `noise` f32
        [B, out, R, R, R], result f32 [B, out, R, R, R].

        cond: [B, L, C], bf16 or f32 (B assets). `noise` (x at t = 1) or `seed` (the engine's
        counter-based normal stream) gives the start. sampler: a preset name, a dict or a
        SamplerSettings; None: the released settings of the model's family.
        callback(step, t, latent) runs after each step with the latent so far (a view valid
        during the call only: clone it to keep it). stream: a CUDA stream (torch, CuPy or an
        int handle) to order the work on; default: the inputs' current stream.
        progress: a tqdm bar over the steps (where tqdm is installed): None follows
        set_progress() (off unless turned on), False none, True or a description string
        one. The bar shows the steps the device has finished and never makes it wait (the
        host stays one step ahead); a callback synchronises after every step."""
        return self._sample(coords, cond, noise, seed, concat_cond, callback, path=path, out=out,
                            stream=stream, keep_first_forward=keep_first_forward,
                            progress=progress, sampler=sampler)

    def _sample(self, coords: Optional[Array], cond: Optional[Array], noise: Optional[Array],
                seed: Optional[int], concat_cond: Optional[Array],
                callback: Optional[Callable[[int, float, Array], Any]] = None, *,
                path: Optional[str] = None, out: Optional[Array] = None,
                stream: Union[int, Any, None] = None, keep_first_forward: bool = False,
                progress: Union[bool, str, None] = None, sampler: SamplerSpec = None,
                settings: Optional[Dict[str, Any]] = None,
                make_room: Optional[Callable[[], Any]] = None,
                release_cache: bool = False) -> Array:
        """sample(), and the one way into the engine of the package's own callers (the torch op
        and the drop-in: docs/PYTHON.md, "The drop-in's sample call"). `settings`: the
        engine's form, already checked (_settings._engine_settings), in place of `sampler`.
        `make_room()`: called before the loop when the request would not fit with the
        engine's flags (_make_room). `release_cache`: the allocator's cached blocks go back to
        the driver after the loop (release_cache())."""
        coords, cond, noise, concat_cond, out, seed, keep_first_forward, path = \
            self._sample_arguments(coords, cond, noise, seed, concat_cond, out,
                                   keep_first_forward, path, callback)
        batch = self._batch("sample", coords, cond, noise, "noise", out)
        like = next(a for a in (coords, noise, cond) if a is not None)
        out = self._host_out(like, out, coords, batch)
        if settings is None:
            settings = _sampler(sampler, self._sampler_preset)._native()
        self._make_room(make_room, coords, noise, cond, batch, path)
        bar = _progress_bar(progress, settings["steps"])
        on_step, on_progress = _sample_hooks(callback, like, bar)
        try:
            with _routing(self._user_log):
                r = self._e.sample(coords, cond, batch, noise=noise,
                                   seed=0 if seed is None else seed,
                                   concat_cond=concat_cond, sampler=settings,
                                   path=path, out=out, callback=on_step,
                                   keep_first_forward=keep_first_forward,
                                   stream=_stream(stream, (coords, cond, noise)),
                                   progress=on_progress)
        finally:
            if bar is not None:
                bar.close()
        self.last_request = {"steps": r["steps"], "stats": r["stats"],
                             "first_v_cond": _as_framework(r["first_v_cond"], like),
                             "first_v_uncond": _as_framework(r["first_v_uncond"], like)}
        if release_cache:
            self._e.release_cache()   # after the loop: the result is not a cached block
        return out if out is not None else _as_framework(r["latent"], like)

    @staticmethod
    def _sample_arguments(coords, cond, noise, seed, concat_cond, out, keep_first_forward, path,
                          callback):
        """sample()'s arguments but the settings, checked in this order (a SparseTensor's
        .coords and .feats read)."""
        if coords is None and hasattr(noise, "feats") and hasattr(noise, "coords"):
            coords = getattr(noise, "coords")   # a SparseTensor's own coords
        coords, cond = _feats(coords), _feats(cond)
        noise, concat_cond = _feats(noise), _feats(concat_cond)
        if cond is None:
            raise Error("sample: cond is required ([B, L, cond_channels])")
        if noise is None and seed is None:
            raise Error("sample: pass the starting noise or a seed")
        if noise is not None and seed is not None:
            raise Error("sample: pass the starting noise or a seed, not both")
        coords = _array(coords, "sample: coords", optional=True)
        cond = _array(cond, "sample: cond")
        noise = _array(noise, "sample: noise", optional=True)
        concat_cond = _array(concat_cond, "sample: concat_cond", optional=True)
        out = _out_array(out, "sample: out")
        seed = None if seed is None else _integer(seed, "sample: seed", *_UINT64)
        keep_first_forward = _flag(keep_first_forward, "sample: keep_first_forward")
        path = _optional_text(path, "sample: path")
        if callback is not None and not callable(callback):
            raise Error(f"sample: callback must be a callable or None, got "
                        f"{type(callback).__name__}")
        return coords, cond, noise, concat_cond, out, seed, keep_first_forward, path

    def _make_room(self, make_room, coords, noise, cond, batch, path):
        """Before a loop: when the request would not fit with the engine's flags (fits(), the
        weights brought back first, as the request has them), make_room() first (the drop-in:
        PyTorch's cached blocks back to the driver, so that the engine drops its memory-costly
        flags only for memory nobody holds). Nothing without a callback, a noise, a [B, L, C]
        condition or a request of at least one token and one asset."""
        if make_room is None or noise is None or len(cond.shape) != 3:
            return
        if coords is not None:
            tokens = int(noise.shape[0])
        else:   # volumes [B, C, R, R, R]
            tokens = batch
            for n in noise.shape[2:]:
                tokens *= int(n)
        if tokens < 1 or batch < 1:
            return
        with _routing(self._user_log):
            self._e.reload()
        if self.fits(tokens, batch, int(cond.shape[1]), path):
            make_room()

    def forward(self, x: Array, t: Union[float, Array], cond: Array,
                concat_cond: Optional[Array] = None, *, coords: Optional[Array] = None,
                path: Optional[str] = None, out: Optional[Array] = None,
                stream: Union[int, Any, None] = None) -> Array:
        """One denoiser call v = model(x_t, t, cond): TRELLIS.2's SLatFlowModel.forward or
        SparseStructureFlowModel.forward.

        x: a SparseTensor (anything with .feats and .coords; the result is x.replace(v)) or
        the features f32/bf16 [T, out] with `coords=`; for a SparseStructureFlowModel also a
        volume f32/bf16 [B, out, R, R, R] with coords=None (the result is a volume too).
        t: 1000 * t per asset ([B]) or one number for every asset."""
        sparse = hasattr(x, "feats") and hasattr(x, "coords")
        feats = x.feats if sparse else x
        if coords is None and sparse:
            coords = x.coords
        if coords is None and not self._grid:
            raise Error(f"forward: x has no .coords; pass coords= (int32 [T, 4]) (coords=None "
                        f"with x a volume is for a model whose assets are whole grids, as a "
                        f"{DENSE}'s; this engine's model is a {self._family})")
        cond, concat_cond = _feats(cond), _feats(concat_cond)
        feats = _array(feats, "forward: x.feats" if sparse else "forward: x")
        coords = _array(coords, "forward: coords", optional=True)
        cond = _array(cond, "forward: cond")
        concat_cond = _array(concat_cond, "forward: concat_cond", optional=True)
        out = _out_array(out, "forward: out")
        path = _optional_text(path, "forward: path")
        batch = self._batch("forward", coords, cond, feats, "x", out)
        if isinstance(t, numbers.Number) or not hasattr(t, "shape"):   # one number for all
            t = _float_array([_real(t, "forward: t")] * batch, feats)
        else:
            t = _array(t, "forward: t")
        out = self._host_out(feats, out, coords, batch)
        with _routing(self._user_log):
            v = self._e.forward(feats, t, coords, cond, batch, concat_cond=concat_cond,
                                path=path, out=out, stream=_stream(stream, (feats, cond)))
        v = out if out is not None else _as_framework(v, feats)
        return x.replace(v) if sparse and hasattr(x, "replace") else v

    __call__ = forward

    def _batch(self, what, coords, cond, latent, latent_name, out):
        """The request's asset count B (from cond, else a volume's first dimension), after
        the checks that tell the two layouts apart (the engine checks the rest)."""
        shape = lambda a: tuple(int(n) for n in a.shape)  # noqa: E731
        volume = latent is not None and len(latent.shape) == 5
        if len(cond.shape) == 3:
            batch = int(cond.shape[0])
        elif volume:
            batch = int(latent.shape[0])
        else:
            batch = 1
        if not self._grid:
            if coords is None:
                raise Error(f"{what}: coords are required (int32 [T, 4]) for a {self._family}; "
                            f"coords=None (volume mode) is for a model whose assets are whole "
                            f"grids, as a {DENSE}'s")
            return batch
        R, C = self._resolution, self._out_channels
        grid = f"[B, {C}, {R}, {R}, {R}]"
        if coords is None:
            for name, a in ((latent_name, latent), ("out", out)):
                if a is not None and len(a.shape) != 5:
                    raise Error(f"{what}: {name} has shape {list(shape(a))}; with coords=None "
                                f"(volume mode) it is a volume {grid}; token rows [T, {C}] "
                                f"need coords (the full {R}^3 grid of each asset)")
            return batch
        for name, a in ((latent_name, latent), ("out", out)):
            if a is not None and len(a.shape) == 5:
                raise Error(f"{what}: {name} is a volume {list(shape(a))}: pass coords=None "
                            f"(volume mode), or token rows [T, {C}] with coords")
        rows = R ** 3
        if len(coords.shape) != 2 or int(coords.shape[0]) != batch * rows:
            raise Error(f"{what}: coords has shape {list(shape(coords))}; a {self._family} of "
                        f"resolution {R} takes coords=None with volumes {grid}, or coords of "
                        f"the full {R}^3 grid of each asset in raster order: [{batch * rows}, 4] "
                        f"for {batch} asset(s)")
        return batch

    def _host_out(self, like, out, coords, batch):
        """NumPy inputs to a GPU engine: the result is written into a NumPy array (NumPy
        cannot hold device memory); otherwise `out` as given."""
        if out is None and _framework(like) == "numpy" and self.device == "cuda":
            import numpy
            C = self._out_channels
            if coords is None:
                R = self._resolution
                shape = (batch, C, R, R, R)
            else:
                shape = (int(coords.shape[0]), C)
            out = numpy.empty(shape, dtype=numpy.float32)
        return out

    def warm_up(self, tokens: Iterable[int], cond_tokens: int) -> None:
        """Builds what requests of these token counts build on first use (library plans, the
        null-context qualification for condition length `cond_tokens`)."""
        if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
            raise Error(f"warm_up: tokens must be a sequence of token counts, got {tokens!r}")
        counts = [_integer(n, "warm_up: tokens", 1, _INT64[1]) for n in tokens]
        cond_tokens = _integer(cond_tokens, "warm_up: cond_tokens", 1, _INT32[1])
        with _routing(self._user_log):
            self._e.warm_up(counts, cond_tokens)

    def fits(self, tokens: int, batch: int, cond_tokens: int, path: Optional[str] = None) -> str:
        """'' when a sample() of this size fits the device memory, else why not. Arguments
        that describe no request (a count below 1) are an Error, not an answer."""
        return self._e.fits(_integer(tokens, "fits: tokens", 1, _INT64[1]),
                            _integer(batch, "fits: batch", 1, _INT32[1]),
                            _integer(cond_tokens, "fits: cond_tokens", 1, _INT32[1]),
                            _optional_text(path, "fits: path"))

    # -- state --

    def counters(self) -> Dict[str, Any]:
        """requests, launches, fallbacks ([{optimization, reason, count}]), memory, and the
        qualification cache's hits and refusals."""
        return self._e.counters()

    def reset_counters(self) -> None:
        self._e.reset_counters()

    def fingerprint(self) -> Dict[str, Any]:
        """The environment the engine's qualifications hold for: versions, GPU, driver (str
        values; has_gpu a bool)."""
        return self._e.fingerprint()

    def qualification(self) -> List[Dict[str, Any]]:
        return self._e.qualification()

    # -- residency --

    def offload(self) -> None:
        """Frees the device memory the engine holds between requests, as a torch module's
        .cpu() frees its parameters': the weights move to pinned host memory (copied the first
        time; the copy is kept, as the weights never change) and the allocator's cached
        blocks go back to the driver. Library plans and graphs, the null-context state and
        the counters stay. The next request, or reload(), brings the weights back: results
        are bit for bit the same. A no-op when already offloaded."""
        self._e.offload()

    def reload(self) -> None:
        """Brings offloaded weights back to the device (one copy; a no-op when resident)."""
        with _routing(self._user_log):
            self._e.reload()

    def residency(self) -> Dict[str, Any]:
        """Where the weights are and what moving them cost: {resident, weight_bytes,
        host_copy_bytes, offloads, reloads, bytes_offloaded, bytes_reloaded,
        device_bytes_released, offload_seconds, reload_seconds} (totals), and
        weights_source: "own copy", "borrowed in place" or "borrowed host home"
        (from_state_dict(borrow=True))."""
        return self._e.residency()

    def release_cache(self) -> int:
        """Returns the device memory the engine's allocator keeps cached between requests
        to the driver (weights and everything built stay), so that other work on the device
        (PyTorch, other engines) can use it; the next request allocates its workspace again.
        Returns the bytes released (0 on the CPU backend)."""
        return self._e.release_cache()

    @property
    def resident(self) -> bool:
        """True when the weights are on the engine's device (False after offload())."""
        return self._e.residency()["resident"]

    @property
    def model(self) -> Dict[str, Any]:
        return self._e.model

    @property
    def family(self) -> str:
        """The model family: "SLatFlowModel" or "SparseStructureFlowModel" (s3d.SLAT,
        s3d.DENSE)."""
        return self._family

    @property
    def sampler_preset(self) -> str:
        """The sampler preset a request that names none gets: the model family's own
        ("released", "released_sparse_structure")."""
        return self._sampler_preset

    @property
    def device(self) -> str:
        return self._e.device

    @property
    def plan(self) -> str:
        return self._e.plan

    def __repr__(self) -> str:
        m = self.model
        return (f"sparse3d_engine.Engine({m['checkpoint']!r}, {m['parameters'] / 1e6:.0f}M parameters, "
                f"path {self.plan!r}, on {self.device})")


def default_path() -> str:
    """The path an engine takes by default (the fastest whose contracts hold)."""
    return _native.default_path()


def paths() -> List[Dict[str, Any]]:
    """Every execution path: [{name, help, flags}]."""
    return _native.paths()


def flags() -> List[Dict[str, Any]]:
    """Every optimization flag: [{name, help, contract}]."""
    return _native.flags()


def draw_noise(seed: int, rows: int, cols: int, offset: int = 0) -> Any:
    """The engine's noise for `seed` (what sample(seed=...) starts from): NumPy f32 [rows, cols]."""
    import numpy
    array: Any = _native.draw_noise(_integer(seed, "draw_noise: seed", *_UINT64),
                                    _integer(rows, "draw_noise: rows", 0, _INT64[1]),
                                    _integer(cols, "draw_noise: cols", 0, _INT64[1]),
                                    _integer(offset, "draw_noise: offset", *_UINT64))
    return numpy.from_dlpack(array)


def timesteps(sampler: SamplerSpec = "released") -> List[float]:
    """The schedule t_0 = 1 > ... > t_steps = 0 (sampler: a preset name, a dict or a
    SamplerSettings)."""
    return _native.timesteps(_sampler(sampler)._native())


def synthetic_presets() -> List[str]:
    """The model presets make_synthetic_checkpoint() knows: "tiny" and "tiny-ss" (seconds on
    the CPU), "trellis2-shape-1024", "trellis2-tex-1024", "trellis2-ss-16" (the released
    models' shapes)."""
    return list(_native.synthetic_presets())


def make_synthetic_checkpoint(out_prefix: Union[str, "os.PathLike[str]"], preset: str = "tiny",
                              seed: int = 0, dtype: str = "bf16") -> Dict[str, Any]:
    """Writes OUT_PREFIX.json and OUT_PREFIX.safetensors with deterministic synthetic weights
    of a preset's model (what `sparse3d make-checkpoint` writes: the same files for the same
    preset, seed and dtype), stored as dtype "bf16" (as released) or "f32". Returns {json,
    safetensors, family, parameters, preset, seed, dtype}."""
    return _native.make_synthetic_checkpoint(
        _text(preset, "preset"), _integer(seed, "make_synthetic_checkpoint: seed", *_UINT64),
        _text(out_prefix, "out_prefix", path=True), _text(dtype, "dtype"))


def build_info() -> Dict[str, Any]:
    """What this package is and runs on: its version, the CUDA version it was built against,
    the native module's path, the Python and NumPy versions, the default path, the CUDA
    libraries it loaded (name, soname, version, path, source; _loader) and the optional
    packages it works with (torch, tqdm; None when absent), without importing them."""
    from importlib import metadata
    cuda: Dict[str, Any]
    try:
        from . import _build
        cuda = {"major": getattr(_build, "CUDA_MAJOR", None),
                "version": getattr(_build, "CUDA_VERSION", None)}
    except ImportError:
        cuda = {"major": _loader.CUDA_MAJOR, "version": None}
    optional: Dict[str, Optional[str]] = {}
    for package in ("numpy", "torch", "tqdm"):
        try:
            optional[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            optional[package] = None
    if hasattr(_loader, "libraries"):
        libraries = _loader.libraries()
    else:
        libraries = [{"name": name, "soname": name, "version": None, "path": path,
                      "source": None} for name, path in getattr(_loader, "loaded", {}).items()]
    return {"version": __version__, "cuda_built": cuda, "native_module": _native.__file__,
            "python": sys.version.split()[0], "platform": sys.platform,
            "default_path": default_path(), "libraries": libraries, "packages": optional}


def __getattr__(name: str) -> Any:
    # `s3d.torch_ops` on first use: it imports torch, which the package does not need.
    if name == "torch_ops":
        import importlib
        return importlib.import_module(f"{__name__}.torch_ops")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
