"""The TRELLIS.2 drop-in: `accelerate(pipeline)` serves the five flow models of a TRELLIS.2
image-to-3D pipeline (the dense sparse-structure model and the four structured-latent
models) from sparse3d_engine engines, with everything else (image conditioning, decoders, the
pipeline's own samplers and their settings) unchanged.

    pipeline = Trellis2ImageTo3DPipeline.from_pretrained("microsoft/TRELLIS.2-4B")
    pipeline.cuda()
    acc = s3d.trellis2.accelerate(pipeline)
    mesh = pipeline.run(image)
    print(acc.report())

Two levels, both counted (docs/PYTHON.md, "TRELLIS.2 drop-in"):

* Each flow model `pipeline.models[NAME]` is replaced by an `EngineFlowModel` with the
  same call and the attributes the pipeline reads: for a SLatFlowModel
  `model(x, t, cond, concat_cond=None) -> SparseTensor` (duck-typed: `.feats`, `.coords`,
  `.replace()`), for the SparseStructureFlowModel `model(x, t, cond) -> tensor` on a dense
  volume [B, C, R, R, R]. Any sampler works on it, one engine forward per model call.
* The pipeline's flow samplers are wrapped: a `sample(model, noise, cond, neg_cond, ...)`
  call on an engine-backed model with a zero negative condition runs the whole loop inside
  the engine (`Engine.sample`: batched CFG, CUDA graphs, the null-context cache), bit for
  bit what `sparse3d run` gives; the result's `.samples` is the latent (a SparseTensor, or
  the dense volume for the sparse-structure model; `pred_x_t` and `pred_x_0` are not
  collected: None).

What the engine cannot serve (an unknown config, a refused request, a negative condition
that is not zero, keyword arguments it does not know) runs on the original PyTorch module or
sampler, and `report()` lists it with the reason and the count: never an error, never a
silent change.

Each engine is built once. The pipeline's low_vram moves (`.cpu()` after a stage, `.to()`
before the next) offload and reload its weights, keeping everything else; `warm_up=True`
builds every engine ahead, in parallel, and runs a small request on each.

With torch tensors, the engine is called through the torch custom ops of `torch_ops`
(`torch.ops.sparse3d_engine.forward` / `.sample`), so that the calls can sit inside a
torch.compile'd region. A sampler's whole loop shows a tqdm bar as TRELLIS.2's samplers do,
where stderr is a terminal (`verbose=False` or `sparse3d_engine.set_progress(False)` turn it
off, `set_progress(True)` on everywhere).
"""
from __future__ import annotations

import concurrent.futures
import inspect
import json
import os
import sys
import time
import types
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import DENSE, SLAT, Engine, Error, Workspace, default_path, model_families
from ._args import _engine_options, _flag, _optional_text, _text
from ._frameworks import (_feats, _framework, _tensor_like, _torch_forward_operands,
                          _torch_sample_operands)
from ._trellis2_args import _sample_call

# The flow models of a TRELLIS.2 image-to-3D pipeline (pipeline.models keys): the dense
# sparse-structure model, then the structured-latent ones.
FLOW_MODELS = ("sparse_structure_flow_model", "shape_slat_flow_model_512",
               "shape_slat_flow_model_1024", "tex_slat_flow_model_512",
               "tex_slat_flow_model_1024")
# Their samplers (pipeline attributes).
FLOW_SAMPLERS = ("sparse_structure_sampler", "shape_slat_sampler", "tex_slat_sampler")
# Samplers whose arithmetic the engine's loop reproduces (by class name: TRELLIS.2 is not
# imported here).
ENGINE_SAMPLERS = ("FlowEulerGuidanceIntervalSampler", "FlowEulerCfgSampler")

# The condition length of each flow model's stage: TRELLIS.2 conditions the sparse-structure
# and 512 stages on its 512 px image features and the 1024 stages on its 1024 px ones
# (Trellis2ImageTo3DPipeline.run), DINOv3 tokens of 16 px patches plus 5 (class and 4
# registers): 1,029 and 4,101 tokens.
COND_TOKENS = {"sparse_structure_flow_model": 1029, "shape_slat_flow_model_512": 1029,
               "shape_slat_flow_model_1024": 4101, "tex_slat_flow_model_512": 1029,
               "tex_slat_flow_model_1024": 4101}
# The warm-up request of a structured-latent model (tokens): one small asset, which builds
# the library plans and graphs and qualifies the null context for the smallest assets; the
# dense model's is one grid (R^3 tokens).
WARM_UP_TOKENS = 4096

# The config keys of SLatFlowModel.__init__ (and SparseStructureFlowModel.__init__, the same
# names) that a module keeps as attributes.
_ARG_ATTRIBUTES = ("resolution", "in_channels", "model_channels", "cond_channels",
                   "out_channels", "num_blocks", "num_heads", "mlp_ratio", "pe_mode",
                   "share_mod", "qk_rms_norm", "qk_rms_norm_cross")


# What a call the drop-in cannot serve may raise on the way to the engine: the engine's own
# refusal (Error) and what an input of the wrong kind raises before it gets there (a list
# where a tensor belongs, a module without the method the drop-in reads, a malformed config).
# Each is a counted fallback to the original, with the reason, never an error of the drop-in.
_UNSERVABLE = (Error, AttributeError, TypeError, ValueError, LookupError)


def _reason(e: BaseException) -> str:
    """A fallback's reason: the engine's message as it is, another exception with its type."""
    return str(e) if isinstance(e, Error) else f"{type(e).__name__}: {e}"


def _check_config(config: Any, source: str) -> None:
    """Raises Error unless `config` is a flow model's {"name": family, "args": {...}}."""
    if not isinstance(config, dict):
        raise Error(f"{source}: the config is a {type(config).__name__}, not a JSON object "
                    f"{{\"name\": ..., \"args\": {{...}}}}")
    families = model_families()
    if config.get("name") not in families:
        raise Error(f"model class {config.get('name')!r} is not a model family of the engine "
                    f"({', '.join(families)})")
    if not isinstance(config.get("args"), dict):
        raise Error(f"{source}: the config's \"args\" is not a JSON object")


def _torch_ops():
    """The torch_ops module where torch is already imported (torch inputs mean it is) and
    recent enough for custom ops; else None (the engine is called directly)."""
    if "torch" not in sys.modules:
        return None
    try:
        from . import torch_ops
    except ImportError:
        return None
    return torch_ops


def _module_base():
    try:
        import torch
        return torch.nn.Module
    except ImportError:
        return object


def _dtype_name(dtype):
    text = str(dtype)
    for name in ("bfloat16", "float16", "float32"):
        if name in text:
            return name
    return None


def family_of_module(module: Any) -> str:
    """"SparseStructureFlowModel" or "SLatFlowModel" for a TRELLIS.2 flow module.

    The rule: the family named as a class of the module's type (its own or a base class),
    among the engine's families (model_families()); else the dense family when the module has
    the dense model's position buffer (`rope_phases` or `pos_emb`: SparseStructureFlowModel
    registers one of them at construction, SLatFlowModel neither); otherwise SLatFlowModel.
    The call convention (a dense tensor or a SparseTensor) is not known before the first call,
    so it is not used."""
    families = model_families()
    for c in type(module).__mro__:
        if c.__name__ in families:
            return c.__name__
    if _has_own(module, "rope_phases") or _has_own(module, "pos_emb"):
        return DENSE
    return SLAT


def _has_own(module, name):
    # torch keeps buffers in _buffers (and the APE model sets rope_phases = None there too);
    # plain objects in their __dict__. getattr() is not used: a wrapper forwarding unknown
    # attributes would answer for anything.
    buffers = getattr(module, "__dict__", {}).get("_buffers")
    if isinstance(buffers, dict) and name in buffers:
        return True
    return name in getattr(module, "__dict__", {})


def config_of_module(module: Any) -> Tuple[Dict[str, Any], str]:
    """(config dict, how it was found) for a SLatFlowModel- or SparseStructureFlowModel-like
    module from its attributes (family_of_module() picks the family). Raises Error naming
    what is missing."""
    family = family_of_module(module)
    args = {}
    missing = [a for a in _ARG_ATTRIBUTES if not hasattr(module, a)]
    if missing:
        raise Error(f"the module has no {', '.join(missing)}: not a {family}")
    for a in _ARG_ATTRIBUTES:
        value = getattr(module, a)
        args[a] = value.item() if hasattr(value, "item") else value
    source = "module attributes"
    # A family that ignores rope_freq (the dense one, docs/DENSE_MODEL.md) is not passed one.
    reads_rope_freq = model_families()[family]["reads_rope_freq"]
    if reads_rope_freq and hasattr(module, "rope_freq"):
        args["rope_freq"] = list(module.rope_freq)
    elif reads_rope_freq and args["pe_mode"] == "rope":
        args["rope_freq"] = [1.0, 10000.0]
        source += f" (rope_freq not kept by the module: {family}'s default [1.0, 10000.0])"
    dtype = _dtype_name(getattr(module, "dtype", None))
    if dtype:
        args["dtype"] = dtype
    return {"name": family, "args": args}, source


class EngineFlowModel(_module_base()):  # type: ignore[misc]  # torch.nn.Module where torch is
    """A flow model served by a sparse3d engine, called as the original: a SLatFlowModel as
    `model(x, t, cond, concat_cond=None)` on a SparseTensor x, the SparseStructureFlowModel as
    `model(x, t, cond)` on a dense volume x [B, C, R, R, R] (`family` says which). The engine
    is built once, on first use on the device of the inputs (or by warm_up()); `.cpu()`
    offloads its weights to host memory and frees its device memory (the pipeline's low_vram
    mode), and the next call brings them back: no rebuild, the same bits."""

    def __init__(self, name: str, original: Any, config: Dict[str, Any], config_source: str,
                 checkpoint: Optional[str] = None, path: Optional[str] = None,
                 engine_options: Optional[Dict[str, Any]] = None, stats: Optional[_Stats] = None,
                 release_on_cpu: bool = True, share_weights: bool = True,
                 release_workspace: bool = True,
                 workspaces: Optional[Dict[int, Workspace]] = None,
                 workspace_memory: str = "driver"):
        if _module_base() is not object:
            super().__init__()
        object.__setattr__(self, "_release_on_cpu", release_on_cpu)
        # The engine uses the module's own parameters (Engine.from_state_dict(borrow=True)):
        # one copy of the weights in the process. After each whole sampler loop the engine's
        # cached workspace goes back to where it came from (Engine.release_cache).
        object.__setattr__(self, "_share_weights", share_weights)
        object.__setattr__(self, "_release_workspace", release_workspace)
        # {CUDA ordinal: Workspace} shared by the pipeline's engines (None: each its own), made
        # with Workspace(memory=workspace_memory) on first use.
        object.__setattr__(self, "_workspaces", workspaces)
        object.__setattr__(self, "_workspace_memory", workspace_memory)
        object.__setattr__(self, "_original_moved", False)
        # Not a registered submodule: .to() on this module must not copy the original's
        # weights to the GPU beside the engine's. It is moved when a fallback needs it.
        object.__setattr__(self, "_original", original)
        self.name = name
        self._config = config
        self.family = config.get("name", SLAT)
        # How the family's assets are called: "grid" (a dense volume [B, C, R, R, R]) or
        # "tokens" (a SparseTensor), from the engine's family registry.
        family = model_families().get(self.family)
        self._grid = family is not None and family["layout"] == "grid"
        self.config_source = config_source
        self._checkpoint = checkpoint
        self._path = path
        self._options = dict(engine_options or {})
        self._engine: Optional[Engine] = None
        self._engine_device: Optional[Tuple[str, int]] = None
        self._offloaded = False   # .cpu() moved the engine's weights to host memory
        self.stats = stats if stats is not None else _Stats()
        for a in _ARG_ATTRIBUTES:
            if hasattr(original, a):
                object.__setattr__(self, a, getattr(original, a))
        for a, v in config["args"].items():
            if not hasattr(self, a):
                object.__setattr__(self, a, v)

    # -- what the pipeline reads --

    @property
    def original(self):
        return self._original

    @property
    def device(self):
        """Where the model runs: the engine's device once built, else the original's."""
        if self._engine_device is not None and self._engine is not None:
            kind, index = self._engine_device
            return _torch_device(kind, index)
        return getattr(self._original, "device", _torch_device("cpu", 0))

    @property
    def dtype(self):
        return getattr(self._original, "dtype", None)

    def __getattr__(self, name):
        # Anything else the pipeline reads comes from the original module.
        try:
            return super().__getattr__(name)
        except AttributeError:
            original = self.__dict__.get("_original")
            if original is None or name.startswith("__"):
                raise
            return getattr(original, name)

    # -- the engine --

    def engine(self, device: Tuple[str, int] = ("cpu", 0), reload: bool = True) -> Engine:
        """The engine on `device` (kind, index), built on first use, with its weights on the
        device (brought back if .cpu() offloaded them). reload=False leaves that to the
        request, which brings them back first thing (the sampler's loop: its one call into
        the Engine, Engine._sample, does it before its memory check)."""
        if self._engine is not None and self._engine_device == device:
            if self._offloaded:
                if reload:
                    self._engine.reload()
                self._offloaded = False
            return self._engine
        self._engine = None
        self._offloaded = False
        options = dict(self._options)
        options.setdefault("path", self._path or "")
        options["device"], options["device_index"] = device
        if options.get("devices"):
            # The inputs' device first (the engine's own), then the others to split over.
            options["devices"] = [device[1]] + [d for d in options["devices"] if d != device[1]]
        elif device[0] == "cuda" and self._workspaces is not None:
            if device[1] not in self._workspaces:
                self._workspaces[device[1]] = Workspace(device[1], memory=self._workspace_memory)
            options["workspace"] = self._workspaces[device[1]]
        if self._checkpoint:
            engine = Engine(self._checkpoint, **options)
        else:
            state_dict = getattr(self._original, "state_dict", None)
            if not callable(state_dict):
                raise Error(f"the module has no state_dict() to read its weights from (pass "
                            f"checkpoints= or pipeline_dir= to load them from files)")
            weights = state_dict()
            if not isinstance(weights, Mapping):
                raise Error(f"the module's state_dict() returned a {type(weights).__name__}, "
                            f"not a mapping of names to tensors")
            engine = Engine.from_state_dict(self._config, _weights(weights),
                                            name=f"{self.name} (state dict)",
                                            borrow=self._share_weights, **options)
        self._engine, self._engine_device = engine, device
        return engine

    def offload(self) -> None:
        """Frees the engine's device memory, keeping the engine (what .cpu() does in the
        pipeline's low_vram mode): its weights move to pinned host memory (copied the first
        time only) and its allocator's cached blocks go back to the driver; library plans,
        graphs and the null-context qualifications stay (Engine.offload). The next call
        brings the weights back (one host-to-device copy). Nothing to do without an engine."""
        if self._engine is None or self._offloaded:
            return
        self._engine.offload()
        self._offloaded = True

    def _moved_to_cpu(self):
        """The pipeline moved this model to the CPU (.cpu() in low_vram mode): with
        release_on_cpu, the engine's device memory goes (offload); an engine on the CPU
        backend has none to free and is left as it is."""
        if not (self._release_on_cpu and self._engine_device and self._engine_device[0] == "cuda"):
            return
        if self._engine is not None and self.weights_source() == "borrowed in place":
            # The engine runs on the module's own device parameters: .cpu() moves them, as it
            # would without the drop-in, and the engine is built again from the host copy on
            # its next use (borrowing that copy), so that no second host copy is made.
            if hasattr(self._original, "cpu"):
                self._original.cpu()
            self._engine = None
            self._engine_device = None
            self._offloaded = False
            return
        self.offload()

    def weights_source(self) -> Optional[str]:
        """Whose memory the engine's weights are (Engine.residency()["weights_source"]):
        "borrowed in place" (the module's own parameters on the GPU), "borrowed host home"
        (the module's host parameters, uploaded per use), "own copy"; None before the engine
        is built."""
        if self._engine is None:
            return None
        return self._engine.residency()["weights_source"]

    def warm_up(self, device: Tuple[str, int], tokens: Optional[int] = None,
                cond_tokens: Optional[int] = None) -> float:
        """Builds the engine on `device` (kind, index) now and runs its warm-up request
        (Engine.warm_up): `tokens` tokens for a SLatFlowModel (default WARM_UP_TOKENS), one
        R^3 grid for the SparseStructureFlowModel, with `cond_tokens` condition tokens
        (default: the stage's, COND_TOKENS; 4,101 for a name it does not list). Returns the
        seconds it took."""
        t0 = time.perf_counter()
        engine = self.engine(device)
        if self._grid:
            tokens = int(self._config["args"]["resolution"]) ** 3
        elif tokens is None:
            tokens = WARM_UP_TOKENS
        if cond_tokens is None:
            cond_tokens = COND_TOKENS.get(self.name, 4101)
        engine.warm_up([tokens], cond_tokens)
        return time.perf_counter() - t0

    def _apply(self, fn, *args, **kwargs):
        # torch's .to()/.cuda()/.cpu()/.half() all come here: probe where fn sends a tensor.
        try:
            import torch
            probe = fn(torch.empty(0, device=self._engine_device_torch()))
        except Exception:  # noqa: BLE001 - a probe that fails changes nothing
            return self
        if probe.device.type == "cpu":
            self._moved_to_cpu()
        if self._original_moved and hasattr(self._original, "_apply"):
            # A fallback moved the original to the inputs' device: it follows the pipeline's
            # moves from then on (low_vram's .cpu() included).
            self._original._apply(fn, *args, **kwargs)
        return self

    def _engine_device_torch(self):
        if self._engine_device and self._engine_device[0] == "cuda":
            return f"cuda:{self._engine_device[1]}"
        return "cpu"

    # -- the call --

    def forward(self, x: Any, t: Any, cond: Any, concat_cond: Any = None, **kwargs: Any) -> Any:
        reason = self._refusal(x, cond, kwargs)
        if reason is None:
            try:
                v = self._serve(x, t, cond, concat_cond)
                self.stats.served("forward")
                return v
            except _UNSERVABLE as e:
                reason = _reason(e)
        self.stats.fell_back("forward", reason)
        return self._run_original(x, t, cond, concat_cond, **kwargs)

    __call__ = forward

    def _refusal(self, x, cond, kwargs):
        if kwargs:
            return f"keyword arguments the engine does not take: {', '.join(sorted(kwargs))}"
        sparse = hasattr(x, "feats") and hasattr(x, "coords")
        if self._grid:
            if sparse:
                return f"x is a SparseTensor (the {self.family} takes a dense volume)"
            if not _tensor_like(x) or len(x.shape) != 5:
                return "x is not a dense volume [B, C, R, R, R]"
        elif not sparse:
            return "x is not a SparseTensor (no .feats/.coords)"
        else:
            for what in ("feats", "coords"):
                if not _tensor_like(getattr(x, what)):
                    return (f"x.{what} is a {type(getattr(x, what)).__name__}, not a tensor")
        if not _tensor_like(_feats(cond)):
            return f"cond is a {type(_feats(cond)).__name__}, not a tensor"
        # Everything else (rows out of batch order, shapes, dtypes) the engine checks itself:
        # its refusal is the fallback's reason.
        return None

    def _device_of(self, tensor):
        if _framework(tensor) == "torch" and tensor.is_cuda:
            return ("cuda", tensor.device.index or 0)
        if _framework(tensor) == "cupy":
            return ("cuda", tensor.device.id)
        return ("cpu", 0)

    def _serve(self, x, t, cond, concat_cond):
        if self._grid:
            return self._serve_dense(x, t, cond, concat_cond)
        feats = x.feats
        engine = self.engine(self._device_of(feats))
        kind = _framework(feats)
        cond_t = _feats(cond)
        concat = _feats(concat_cond)
        coords = x.coords
        if kind == "torch":
            # The torch op casts as the original does (f16 to f32, int32 coordinates, t per
            # asset); without custom ops (torch < 2.4) the same casts, then the engine.
            ops = _torch_ops()
            if ops is not None:
                v = ops.forward(engine, feats, t, cond_t, concat, coords=coords)
                return x.replace(v if v.dtype == x.feats.dtype else v.to(x.feats.dtype))
            feats, t, cond_t, concat, coords = _torch_forward_operands(feats, t, cond_t, concat,
                                                                       coords)
        v = engine.forward(feats, t, cond_t, concat, coords=coords)
        if kind == "torch" and v.dtype != x.feats.dtype:
            v = v.to(x.feats.dtype)  # the original returns x's dtype
        return x.replace(v)

    def _serve_dense(self, x, t, cond, concat_cond):
        """The SparseStructureFlowModel's call: x a volume [B, C, R, R, R], the result a
        volume of x's dtype (the engine's volume mode: no coords)."""
        if concat_cond is not None:
            raise Error("concat_cond given: the SparseStructureFlowModel takes none")
        engine = self.engine(self._device_of(x))
        cond_t = _feats(cond)
        vol = x
        if _framework(x) == "torch":
            ops = _torch_ops()   # as _serve: the op casts, or the same casts without one
            if ops is not None:
                v = ops.forward(engine, vol, t, cond_t)
                return v if v.dtype == x.dtype else v.to(x.dtype)
            vol, t, cond_t, _, _ = _torch_forward_operands(vol, t, cond_t)
        v = engine.forward(vol, t, cond_t)
        if _framework(v) == "torch" and v.dtype != x.dtype:
            v = v.to(x.dtype)   # the original returns x's dtype
        return v

    def _run_original(self, x, t, cond, concat_cond, **kwargs):
        if concat_cond is not None:
            kwargs["concat_cond"] = concat_cond
        # The pipeline moved this module, not the original (it is not a submodule): move the
        # original to the inputs' device for the call.
        target = getattr(getattr(x, "feats", x), "device", None)
        if target is not None and hasattr(self._original, "parameters"):
            first = next(iter(self._original.parameters()), None)
            if first is not None and first.device != target:
                self._original.to(target)
                object.__setattr__(self, "_original_moved", True)
        return self._original(x, t, cond, **kwargs)

    def __repr__(self):
        return (f"EngineFlowModel({self.name}, {self.family}, engine path "
                f"{self._path or 'default'}, config from {self.config_source})")


def _weights(state_dict):
    """The tensors an engine loads from a module's state dict: the dense model's position
    buffer (`rope_phases`, complex64, or `pos_emb`), which the module computes at
    construction from its config, is left out: the engine computes the same table on the
    host (docs/DENSE_MODEL.md)."""
    return {k: v for k, v in state_dict.items() if k not in _POSITION_BUFFERS}


_POSITION_BUFFERS = ("rope_phases", "pos_emb")


def _torch_device(kind, index):
    try:
        import torch
        return torch.device(kind, index) if kind == "cuda" else torch.device("cpu")
    except ImportError:
        return f"{kind}:{index}" if kind == "cuda" else "cpu"


class _Stats:
    """Calls served and fallbacks by reason (report())."""

    def __init__(self):
        # A plain dict, not a Counter: a model's forward counts its calls, and torch.compile
        # (torch 2.6's dynamo) traces a dict's update but not a Counter's.
        self.calls: Dict[str, int] = {}
        self.fallbacks = Counter()

    def served(self, what):
        self.calls[what] = self.calls.get(what, 0) + 1

    def fell_back(self, what, reason):
        self.fallbacks[(what, reason)] += 1


class EngineSampler:
    """Wraps a TRELLIS.2 flow sampler: `sample()` on an engine-backed model runs the whole
    loop in the engine when it can, else the original sampler (counted, with the reason)."""

    def __init__(self, name: str, original: Any, stats: Optional[_Stats] = None):
        self.name = name
        self.original = original
        self.stats = stats if stats is not None else _Stats()
        # accelerate() wraps only samplers whose sample() it can read (_sampler_refusal).
        self._signature = inspect.signature(original.sample)

    def __getattr__(self, attr):
        return getattr(self.original, attr)

    def sample(self, model: Any, noise: Any, cond: Any, neg_cond: Any = None, *args: Any,
               **kwargs: Any) -> Any:
        try:
            bound = self._signature.bind(model, noise, cond, neg_cond, *args, **kwargs)
        except TypeError as e:
            self.stats.fell_back("sample", f"arguments: {e}")
            return self.original.sample(model, noise, cond, neg_cond, *args, **kwargs)
        bound.apply_defaults()
        try:
            reason, call = self._plan(model, noise, cond, bound.arguments)
        except _UNSERVABLE as e:   # settings of the wrong kind (steps=2.7, a str): refused
            reason, call = _reason(e), None
        if reason is None:
            try:
                out = self._serve(model, noise, call)
                self.stats.served("sample")
                return out
            except _UNSERVABLE as e:
                reason = _reason(e)
        self.stats.fell_back("sample", reason)
        return self.original.sample(model, noise, cond, neg_cond, *args, **kwargs)

    def _plan(self, model, noise, cond, arguments):
        """(reason the engine cannot run the call or None, the call in the engine's form:
        _trellis2_args, where TRELLIS.2's keyword arguments and tensors are read, once)."""
        if type(self.original).__name__ not in ENGINE_SAMPLERS:
            return f"sampler {type(self.original).__name__} is not one the engine runs", None
        if not isinstance(model, EngineFlowModel):
            return "the model is not engine-backed", None
        return _sample_call(noise, cond, arguments, model._grid, model.family,
                            getattr(self.original, "sigma_min", 1e-5))

    def _serve(self, model, noise, call):
        """The whole loop in the engine (_engine_loop), its latent as TRELLIS.2's sampler
        returns it."""
        # The weights, if offloaded, come back inside the one call into the Engine.
        engine = model.engine(model._device_of(call.noise), reload=False)
        # The workspace is held only while a loop runs: released inside that call.
        release = bool(model._release_workspace and model._engine_device and
                       model._engine_device[0] == "cuda")
        latent = _engine_loop(engine, call, release)
        dtype = getattr(call.noise, "dtype", None)
        if _framework(latent) == "torch" and latent.dtype != dtype:
            latent = latent.to(dtype)
        samples = latent if model._grid else noise.replace(latent)
        return types.SimpleNamespace(samples=samples, pred_x_t=None, pred_x_0=None)


def _engine_loop(engine, call, release_cache):
    """One call into the engine for the whole loop: the torch op for torch tensors (where
    torch has custom ops; it casts as the original does, and on a GPU makes room first),
    else Engine._sample; never both (docs/PYTHON.md, "The drop-in's sample call")."""
    torch_inputs = _framework(call.noise) == "torch"
    if torch_inputs and _torch_ops() is not None:
        import torch   # imported already: the inputs are torch tensors
        return torch.ops.sparse3d_engine.sample(
            engine.id, call.coords, call.cond, call.noise, None, call.concat_cond,
            **call.settings, path=None, progress=call.progress is not False,
            desc=call.progress or "Sampling", make_room=True, release_cache=release_cache)
    coords, noise, cond, concat = call.coords, call.noise, call.cond, call.concat_cond
    if torch_inputs:   # torch without custom ops: the op's casts, here
        coords, noise, cond, concat = _torch_sample_operands(coords, noise, cond, concat)
    return engine._sample(coords, cond, noise, None, concat, progress=call.progress,
                          settings=call.settings, release_cache=release_cache)


class Acceleration:
    """What accelerate() did: the engine-backed models and samplers, what it left alone and
    why; report() adds the calls served and the fallbacks; restore() undoes it."""

    def __init__(self, pipeline: Any):
        self.pipeline = pipeline
        self.models: Dict[str, EngineFlowModel] = {}
        self.samplers: Dict[str, EngineSampler] = {}
        self.skipped: Dict[str, str] = {}     # name -> why it stayed on PyTorch
        self.warm_up_seconds: Dict[str, float] = {}  # name -> seconds its warm-up took
        # accelerate(export=True): o_voxel.postprocess's own to_glb, while ours stands in for it
        self.replaced_to_glb: Optional[Any] = None
        # The device workspace per CUDA ordinal that the engines share (share_workspace), and
        # where its memory comes from (accelerate's workspace_memory).
        self.workspaces: Dict[int, Workspace] = {}
        self.workspace_memory = "torch"

    def warm_up(self, models: Optional[Iterable[str]] = None, tokens: Optional[int] = None,
                cond_tokens: Optional[Mapping[str, int]] = None,
                device: Any = None) -> Dict[str, float]:
        """Builds the engines of `models` (names; default: every accelerated model) now on
        `device` (default: the pipeline's) and runs each one's warm-up request
        (EngineFlowModel.warm_up; `cond_tokens` {name: L} overrides COND_TOKENS), so that the
        first pipeline.run() builds nothing. Engines build in parallel (the GIL is released
        while they build), except in the pipeline's low_vram mode, which keeps one flow model
        on the GPU at a time: there they build one after the other and each is offloaded
        after its warm-up (the pipeline's .to() before the stage brings it back). An engine
        that cannot be built or warmed up is reported (report(), fallbacks()) and tried again
        on first use. Returns {name: seconds}."""
        names = list(self.models) if models is None else list(models)
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise Error(f"warm_up: {', '.join(unknown)} not accelerated (accelerated: "
                        f"{', '.join(self.models) or 'none'})")
        target = _device_tuple(device if device is not None else _pipeline_device(self.pipeline))
        low_vram = bool(getattr(self.pipeline, "low_vram", False))
        overrides = dict(cond_tokens or {})

        def one(name):
            model = self.models[name]
            try:
                took = model.warm_up(target, tokens, overrides.get(name))
            except _UNSERVABLE as e:
                model.stats.fell_back("warm_up", _reason(e))
                return None
            if low_vram:
                model._moved_to_cpu()   # where the pipeline keeps it between its stages
            return took

        workers = 1 if low_vram else max(1, len(names))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            took = dict(zip(names, pool.map(one, names)))
        self.warm_up_seconds.update({n: t for n, t in took.items() if t is not None})
        return {n: t for n, t in took.items() if t is not None}

    def report(self) -> str:
        lines = []
        for name, m in self.models.items():
            lines.append(f"{name}: sparse3d engine ({m.family}; path {m._path or 'default'}; "
                         f"config from {m.config_source}); forward calls served "
                         f"{m.stats.calls.get('forward', 0)}")
            if name in self.warm_up_seconds:
                lines.append(f"  warmed up in {self.warm_up_seconds[name]:.2f} s")
            engine = m._engine
            if engine is not None:
                r = engine.residency()
                kind, index = m._engine_device or ("cpu", 0)
                where = "the CPU" if kind == "cpu" else f"cuda:{index}"
                state = "on the device" if r["resident"] else "offloaded to host memory"
                lines.append(f"  engine on {where}, weights {state} ({r['weight_bytes'] / 2**30:.2f} "
                             f"GiB, {r['weights_source']}; offloads {r['offloads']}, reloads "
                             f"{r['reloads']}, {(r['bytes_offloaded'] + r['bytes_reloaded']) / 2**30:.2f} "
                             f"GiB moved)")
                for f in engine.counters()["fallbacks"]:
                    lines.append(f"  engine fallback {f['optimization']} x{f['count']}: {f['reason']}")
            for (what, reason), n in sorted(m.stats.fallbacks.items()):
                if what == "warm_up":
                    lines.append(f"  warm-up failed x{n}: {reason} (tried again on first use)")
                else:
                    lines.append(f"  fell back to PyTorch ({what}) x{n}: {reason}")
        for name, s in self.samplers.items():
            lines.append(f"{name}: whole loops in the engine {s.stats.calls.get('sample', 0)}")
            for (what, reason), n in sorted(s.stats.fallbacks.items()):
                lines.append(f"  ran the original sampler x{n}: {reason}")
        if self.replaced_to_glb is not None:
            lines.append("o_voxel.postprocess.to_glb: sparse3d's export (sparse3d_engine.trellis2.to_glb)")
        for name, why in self.skipped.items():
            lines.append(f"{name}: left on PyTorch: {why}")
        return "\n".join(lines)

    def fallbacks(self) -> List[Dict[str, Any]]:
        """Every fallback as {"where", "what", "reason", "count"}."""
        out = []
        for where, obj in list(self.models.items()) + list(self.samplers.items()):
            for (what, reason), n in sorted(obj.stats.fallbacks.items()):
                out.append({"where": where, "what": what, "reason": reason, "count": n})
        return out

    def restore(self) -> None:
        """Puts the original modules, samplers and o_voxel's to_glb back."""
        for name, m in self.models.items():
            self.pipeline.models[name] = m.original
        for name, s in self.samplers.items():
            setattr(self.pipeline, name, s.original)
        self.models.clear()
        self.samplers.clear()
        if self.replaced_to_glb is not None:
            import sys
            module = sys.modules.get("o_voxel.postprocess")
            if module is not None and getattr(module, "to_glb", None) is to_glb:
                module.to_glb = self.replaced_to_glb
            self.replaced_to_glb = None

    def __repr__(self):
        return self.report()


def _pipeline_device(pipeline):
    """The pipeline's device (TRELLIS.2's Pipeline.device: where .cuda()/.to() put it), or
    "cpu" when it has none."""
    try:
        return getattr(pipeline, "device", "cpu")
    except Exception:  # noqa: BLE001 - TRELLIS.2's property raises when it finds none
        return "cpu"


def _device_tuple(device):
    """(kind, index) of a torch.device, a "cuda:1"-style string or such a tuple."""
    if isinstance(device, tuple):
        return device
    text = str(device)   # a torch.device prints as "cuda:1", "cuda" or "cpu"
    if text == "cpu":
        return ("cpu", 0)
    if text == "cuda" or text.startswith("cuda:"):
        index = text[5:]
        if index == "" or index.isdigit():
            return ("cuda", int(index or 0))
    raise Error(f"device must be \"cpu\", \"cuda\", \"cuda:N\" or a torch.device, got {device!r}")


def _checkpoint_for(name, module, checkpoints, pipeline_dir):
    """A NAME.json for model `name`, or None (then the module's state dict is used)."""
    if checkpoints and name in checkpoints:
        return os.fspath(checkpoints[name])
    if pipeline_dir:
        pipeline_dir = os.fspath(pipeline_dir)
        listing = os.path.join(pipeline_dir, "pipeline.json")
        if os.path.exists(listing):
            with open(listing) as f:
                entry = json.load(f).get("args", {}).get("models", {}).get(name)
            if entry and not entry.startswith(("http:", "https:")) and "/" in entry:
                candidate = os.path.join(pipeline_dir, entry + ".json")
                if os.path.exists(candidate):
                    return candidate
        candidate = os.path.join(pipeline_dir, "ckpts", getattr(module, "_sparse3d_ckpt", name) + ".json")
        if os.path.exists(candidate):
            return candidate
    return None


def _sampler_refusal(sampler: Any) -> Optional[str]:
    """Why `sampler` cannot be wrapped (it stays as it is), or None: the wrapper binds each
    call's arguments to the signature of its sample()."""
    sample = getattr(sampler, "sample", None)
    if not callable(sample):
        return f"{type(sampler).__name__} has no sample() method: not a flow sampler"
    try:
        inspect.signature(sample)
    except (TypeError, ValueError) as e:
        return f"the signature of its sample() cannot be read ({e})"
    return None


# The keyword arguments accelerate() passes on to each s3d.Engine it builds (the engine's
# device is always the inputs': `device` and `device_index` are accepted, and replaced).
ENGINE_OPTIONS = ("device", "device_index", "max_device_memory_gib", "cache_dir",
                  "persist_qualification", "qualify_m", "log", "devices", "parallel_min_tokens")


def _names(value: Any, name: str) -> List[str]:
    """A sequence of str (models, samplers, warm_up's list) as a list, or an Error naming it."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise Error(f"accelerate: {name} must be a sequence of names (str), got {value!r}")
    names = list(value)
    for n in names:
        if not isinstance(n, str):
            raise Error(f"accelerate: {name} must hold names (str), got {n!r} "
                        f"({type(n).__name__})")
    return names


def _check_arguments(path, models, samplers, checkpoints, pipeline_dir, release_on_cpu,
                     warm_up, engine_options) -> None:
    """Refuses what the caller got wrong, by name, before anything is replaced: an unknown
    keyword (a TypeError, as any Python function's), a value of the wrong type (an Error).
    What the drop-in cannot serve (the pipeline's own modules, configs and calls) is not a
    mistake of the caller: a counted fallback, as documented."""
    unknown = sorted(set(engine_options) - set(ENGINE_OPTIONS))
    if unknown:
        raise TypeError(f"accelerate() got an unexpected keyword argument {unknown[0]!r} "
                        f"(engine options: {', '.join(ENGINE_OPTIONS)})")
    log = engine_options.get("log")
    if log is not None and not callable(log):
        raise Error(f"accelerate: log must be a callable or None, got {type(log).__name__}")
    try:
        _engine_options(_optional_text(path, "path") or "",
                        engine_options.get("device", "auto"),
                        engine_options.get("device_index", 0),
                        engine_options.get("max_device_memory_gib", 0.0),
                        engine_options.get("cache_dir", ""),
                        engine_options.get("persist_qualification", True),
                        engine_options.get("qualify_m", ()),
                        engine_options.get("devices", ()),
                        engine_options.get("parallel_min_tokens", 8192))
    except Error as e:
        raise Error(f"accelerate: {e}") from None
    _names(models, "models")
    _names(samplers, "samplers")
    if checkpoints is not None:
        if not isinstance(checkpoints, Mapping):
            raise Error(f"accelerate: checkpoints must be a mapping {{model name: NAME.json}} "
                        f"or None, got {type(checkpoints).__name__}")
        for key, value in checkpoints.items():
            if not isinstance(key, str):
                raise Error(f"accelerate: checkpoints' keys must be model names (str), got "
                            f"{key!r} ({type(key).__name__})")
            _text(value, f"accelerate: checkpoints[{key!r}]", path=True)
    if pipeline_dir is not None:
        _text(pipeline_dir, "accelerate: pipeline_dir", path=True)
    _flag(release_on_cpu, "accelerate: release_on_cpu")
    if not isinstance(warm_up, (bool, str)):
        _names(warm_up, "warm_up")


def _check_warm_up(pipeline, models, warm_up) -> None:
    """accelerate(warm_up=...): the names it gives must be models accelerate() serves and the
    pipeline has, and the pipeline's device one the engines can run on, before anything is
    replaced (a warm-up that fails later, after the replacement, would leave the pipeline half
    changed with no Acceleration to restore it)."""
    if warm_up is False:
        return
    if warm_up is not True:
        names = [warm_up] if isinstance(warm_up, str) else list(warm_up)
        table = getattr(pipeline, "models", None)
        held = set(table) if isinstance(table, dict) else set()
        unknown = [n for n in names if n not in models or n not in held]
        if unknown:
            raise Error(f"accelerate: warm_up names {', '.join(map(repr, unknown))}, which "
                        f"{'is' if len(unknown) == 1 else 'are'} not among the models it "
                        f"accelerates here ({', '.join(n for n in models if n in held) or 'none'})")
    try:
        _device_tuple(_pipeline_device(pipeline))
    except Error as e:
        raise Error(f"accelerate: warm_up runs on the pipeline's device, and {e}") from None


def _check_memory_options(export, share_weights, release_workspace, share_workspace,
                          fit_memory, workspace_memory) -> None:
    """accelerate(): its switches are booleans, workspace_memory one of the two sources."""
    _flag(export, "accelerate: export")
    _flag(share_weights, "accelerate: share_weights")
    _flag(release_workspace, "accelerate: release_workspace")
    _flag(share_workspace, "accelerate: share_workspace")
    _flag(fit_memory, "accelerate: fit_memory")
    if workspace_memory not in ("torch", "driver"):
        raise Error(f"accelerate: workspace_memory must be 'torch' or 'driver', got "
                    f"{workspace_memory!r}")


def _replace_models(acc: Acceleration, table: dict, models: Sequence[str],
                    checkpoints: Optional[Mapping[str, str]], pipeline_dir: Optional[str],
                    path: Optional[str], engine_options: Mapping[str, Any],
                    release_on_cpu: bool, share_weights: bool, release_workspace: bool,
                    share_workspace: bool) -> None:
    """accelerate(): puts an EngineFlowModel in `table` for each of `models` it can serve,
    recording in acc.skipped why the others stay on PyTorch."""
    for name in models:
        module = table.get(name)
        if module is None:
            continue
        if isinstance(module, EngineFlowModel):
            acc.skipped[name] = "already accelerated"
            continue
        checkpoint = _checkpoint_for(name, module, checkpoints, pipeline_dir)
        try:
            if checkpoint:
                with open(checkpoint) as f:
                    config = json.load(f)
                source = checkpoint
            else:
                config, source = config_of_module(module)
            _check_config(config, source)
        except (OSError, *_UNSERVABLE) as e:
            acc.skipped[name] = _reason(e)
            continue
        table[name] = EngineFlowModel(name, module, config, source, checkpoint=checkpoint,
                                      path=path, engine_options=engine_options,
                                      release_on_cpu=release_on_cpu,
                                      share_weights=share_weights,
                                      release_workspace=release_workspace,
                                      workspaces=acc.workspaces if share_workspace else None,
                                      workspace_memory=acc.workspace_memory)
        acc.models[name] = table[name]


def _replace_samplers(acc: Acceleration, pipeline: Any, samplers: Sequence[str]) -> None:
    """accelerate(): wraps each of the pipeline's `samplers` it can serve in an EngineSampler."""
    for attr in samplers:
        original = getattr(pipeline, attr, None)
        if original is None or isinstance(original, EngineSampler):
            continue
        why = _sampler_refusal(original)
        if why is not None:
            acc.skipped[attr] = why
            continue
        wrapped = EngineSampler(attr, original)
        setattr(pipeline, attr, wrapped)
        acc.samplers[attr] = wrapped


def _warm_up_replaced(acc: Acceleration, warm_up: Union[bool, str, Sequence[str]]) -> None:
    """accelerate(warm_up=...): warms up the engines it asks for, once all is replaced."""
    if warm_up is True:
        acc.warm_up()
    elif warm_up:
        names = [warm_up] if isinstance(warm_up, str) else list(warm_up)
        # A model left on PyTorch (acc.skipped says why) has no engine to warm up.
        acc.warm_up(models=[n for n in names if n not in acc.skipped])


def accelerate(pipeline: Any, path: Optional[str] = None, models: Sequence[str] = FLOW_MODELS,
               samplers: Sequence[str] = FLOW_SAMPLERS,
               checkpoints: Optional[Mapping[str, str]] = None,
               pipeline_dir: Optional[str] = None, release_on_cpu: bool = True,
               warm_up: Union[bool, str, Sequence[str]] = False, export: bool = False,
               share_weights: bool = True, release_workspace: bool = True,
               share_workspace: bool = True, fit_memory: bool = True,
               workspace_memory: str = "torch", **engine_options: Any) -> Acceleration:
    """Serves `pipeline`'s flow models (FLOW_MODELS: the sparse-structure model and the four
    structured-latent ones) and their samplers (FLOW_SAMPLERS) from sparse3d_engine.

    path: the engine's execution path (default: the fastest whose contracts hold).
    checkpoints: {model name: NAME.json} to load from files; pipeline_dir: the pipeline's
    folder (its pipeline.json names the ckpts/); otherwise the weights are read from the
    module's state dict in memory, and the config from its attributes. share_weights (True):
    the engines use the modules' own parameters, not a copy (one copy of the weights in the
    process: on the GPU in place, with low_vram the host parameters the engine uploads from);
    False gives each engine a copy of its own. share_workspace (True): the engines on one GPU
    share one device workspace (s3d.Workspace: one allocator for activations, library
    workspaces and graph pools; they never run at once); False gives each its own.
    workspace_memory ("torch"): the shared workspace takes its blocks from PyTorch's caching
    allocator and gives them back to it, so that release_workspace hands them to PyTorch's
    decoders and the next stage takes them back without a cudaMalloc; "driver": from and to
    the driver (cudaMalloc, cudaFree), as an engine's own workspace does.
    fit_memory (True): each request's memory-costly flags are held to what the original
    PyTorch module would allocate for it (Engine fit_to_reference: the condition K/V cache,
    then batched CFG, dropped where they are above it, counted in acc.report()), and without
    a `path` the engines run the default path without CUDA graphs (their pools hold a second
    copy of the activations); False: the fastest path, every flag the device has room for.
    release_workspace (True): after each whole sampler loop the cached workspace goes back to
    where it came from (workspace_memory), so that PyTorch's decoders and the next stage have
    that memory. release_on_cpu: a
    model's .cpu() (the pipeline's low_vram mode, TRELLIS.2's default) frees its engine's
    device memory (the weights' device buffer; with share_weights nothing is copied, as the
    module's host parameters are the engine's home; otherwise they move to pinned host
    memory) and they come back on the next call, the engine and all it has built stay
    (EngineFlowModel.offload); False keeps them on the GPU. warm_up: True builds every engine now on the pipeline's device and runs a small
    request on each (Acceleration.warm_up), so that the first pipeline.run() builds nothing;
    a list of model names warms up those only. export: True also puts sparse3d's GLB export
    in place of o_voxel.postprocess.to_glb (same arguments; it returns a GlbMesh, whose
    .export(path, extension_webp=True) writes the file, not a trimesh.Trimesh; restore() puts
    the original back); without o_voxel installed that is skipped, and said. engine_options go
    to s3d.Engine
    (ENGINE_OPTIONS: cache_dir, max_device_memory_gib, log, ...). Returns an Acceleration.

    The caller's mistakes raise before anything is replaced: an unknown keyword is a
    TypeError, an argument of the wrong type or value (the engine's own checks, a warm-up
    name the pipeline lacks, a pipeline device a warm-up cannot use) an Error naming it; what
    raises after the replacement began puts everything back first. What the drop-in cannot
    serve stays on PyTorch, counted (docs/PYTHON.md)."""
    _check_arguments(path, models, samplers, checkpoints, pipeline_dir, release_on_cpu,
                     warm_up, engine_options)
    _check_memory_options(export, share_weights, release_workspace, share_workspace,
                          fit_memory, workspace_memory)
    _check_warm_up(pipeline, models, warm_up)
    if fit_memory:
        engine_options = dict(engine_options, fit_to_reference=True)
        if path is None:
            # CUDA graphs keep a private pool of each captured segment's activations beside the
            # shared workspace: in TRELLIS.2's pipeline they cost 1.8 GiB at 31,006 tokens and
            # no time (the engine's path without them, measured 2026-12-02 on the H200).
            path = default_path() + "-cuda_graphs"
    acc = Acceleration(pipeline)
    acc.workspace_memory = workspace_memory
    table = getattr(pipeline, "models", None)
    if not isinstance(table, dict):
        raise Error("accelerate: the pipeline has no `models` dict (a TRELLIS.2 pipeline has one)")
    # Either the pipeline is accelerated as asked or left as it was: whatever raises on the
    # way (an interrupt, an engine that cannot be warmed up raising) puts back what was replaced.
    try:
        _replace_models(acc, table, models, checkpoints, pipeline_dir, path, engine_options,
                        release_on_cpu, share_weights, release_workspace, share_workspace)
        _replace_samplers(acc, pipeline, samplers)
        if export:
            _replace_to_glb(acc)
        _warm_up_replaced(acc, warm_up)
    except BaseException:
        acc.restore()
        raise
    return acc


from .glb import GlbMesh, to_glb  # noqa: E402  (the export, re-exported for the drop-in)


def _replace_to_glb(acc: Acceleration) -> None:
    """accelerate(export=True): o_voxel.postprocess.to_glb becomes ours, or acc.skipped says why
    not. TRELLIS.2's example.py and app.py call it as o_voxel.postprocess.to_glb(...), so the
    module attribute is what they see."""
    try:
        import o_voxel.postprocess as postprocess
    except ImportError as e:
        acc.skipped["to_glb"] = f"o_voxel.postprocess does not import ({e})"
        return
    current = getattr(postprocess, "to_glb", None)
    if current is to_glb:
        acc.skipped["to_glb"] = "already sparse3d's"
        return
    acc.replaced_to_glb = current
    postprocess.to_glb = to_glb

__all__ = ["accelerate", "to_glb", "GlbMesh", "Acceleration", "ENGINE_OPTIONS", "EngineFlowModel", "EngineSampler", "config_of_module",
           "family_of_module", "FLOW_MODELS", "FLOW_SAMPLERS", "COND_TOKENS", "WARM_UP_TOKENS"]
