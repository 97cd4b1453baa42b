"""The nodes of the sparse3d ComfyUI pack.

Two routes into the engine, both counted:

* "sparse3d: accelerate TRELLIS.2 pipeline": sparse3d_engine.trellis2.accelerate() on the
  TRELLIS.2 pipeline object a loader node of another pack passes on (one node class per type
  string those packs use, PIPELINE_TYPES), returning the same object, accelerated.
* "sparse3d: flow model patch": a ComfyUI MODEL whose diffusion_model is a TRELLIS.2 flow
  model (a pack that drives ComfyUI's own KSampler with it) is cloned, and each model call
  of the sampler goes through the engine (one engine forward per step); what the engine
  cannot serve runs the original apply_model, counted with the reason.

Nothing here imports sparse3d_engine or torch at import time: the pack loads without them,
and a node run without them raises one error saying what to install.
"""
from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Dict, Optional, Tuple

CATEGORY = "sparse3d"

# The ComfyUI type strings under which the common TRELLIS.2 packs pass the pipeline:
#   TRELLIS2PIPELINE   visualbruno/ComfyUI-Trellis2 (Trellis2LoadModel): the
#                      Trellis2ImageTo3DPipeline object itself (and packs built on it).
#   TRELLIS2_PIPELINE  PozzettiAndrea/ComfyUI-TRELLIS2 before its move to process isolation
#                      (DownloadAndLoadTrellis2Model): a dict {"pipeline": pipeline, ...}.
# Either form is accepted by either node (the object, or a dict holding it under "pipeline").
PIPELINE_TYPES = ("TRELLIS2PIPELINE", "TRELLIS2_PIPELINE")

# The attribute under which the pipeline keeps what this pack did to it (idempotence).
_STATE = "_sparse3d_comfyui"

INSTALL = ("pip install sparse3d-engine-cu12 (CUDA 12) or sparse3d-engine-cu13 (CUDA 13) "
           "into ComfyUI's Python environment")


class Sparse3dNodeError(RuntimeError):
    """What a node of this pack raises: one message naming the cause."""


def _engine_modules():
    """(sparse3d_engine, sparse3d_engine.trellis2), or the one error saying what to install."""
    try:
        import sparse3d_engine
        import sparse3d_engine.trellis2 as trellis2
    except ImportError as e:
        raise Sparse3dNodeError(f"sparse3d: the sparse3d_engine package does not import "
                                f"({e}); {INSTALL}") from None
    return sparse3d_engine, trellis2


def _require_torch():
    try:
        import torch
    except ImportError as e:
        raise Sparse3dNodeError(f"sparse3d: torch does not import ({e}); the flow model patch "
                                f"runs inside ComfyUI, which needs torch") from None
    return torch


def _unwrap_pipeline(value: Any) -> Any:
    """The pipeline object a pack passes: the object itself (it has a `models` dict), or a
    dict holding it under "pipeline"."""
    if isinstance(value, dict):
        if "pipeline" not in value:
            raise Sparse3dNodeError(
                "sparse3d: the input is a dict without a \"pipeline\" entry: not a TRELLIS.2 "
                "pipeline this node can accelerate (packs that pass a configuration and build "
                "their models inside their own nodes have no pipeline object to accelerate)")
        if value["pipeline"] is None:
            raise Sparse3dNodeError(
                "sparse3d: the input holds no loaded pipeline (its \"pipeline\" is None: a "
                "pack that loads the pipeline lazily, inside its own generation node, cannot "
                "be accelerated by this node)")
        value = value["pipeline"]
    pipeline = value
    if not isinstance(getattr(pipeline, "models", None), dict):
        raise Sparse3dNodeError(
            f"sparse3d: the input ({type(pipeline).__name__}) has no `models` dict: not a "
            f"TRELLIS.2 pipeline (Trellis2ImageTo3DPipeline) this node can accelerate")
    return pipeline


def _fallback_lines(acc: Any) -> str:
    fallbacks = acc.fallbacks()
    total = sum(f["count"] for f in fallbacks)
    return f"fallbacks to PyTorch: {total}" + "".join(
        f"\n  {f['where']} ({f['what']}) x{f['count']}: {f['reason']}" for f in fallbacks)


def acceleration_report(pipeline_value: Any) -> str:
    """The report of what this pack did to a pipeline: the Acceleration's report() (models,
    calls served, fallbacks with reasons) and the fallback total."""
    pipeline = _unwrap_pipeline(pipeline_value)
    state = getattr(pipeline, _STATE, None)
    if state is None:
        return "sparse3d: this pipeline was not accelerated by the sparse3d node"
    acc = state["acceleration"]
    return f"{acc.report()}\n{_fallback_lines(acc)}"


class _AccelerateTrellis2:
    """Serves the pipeline's five flow models and three flow samplers from sparse3d engines
    (sparse3d_engine.trellis2.accelerate); everything else of the pipeline is unchanged.
    Returns the same object. A second pass with the same options changes nothing; with other
    options the first acceleration is undone and the pipeline accelerated again."""

    PIPELINE_TYPE = "TRELLIS2PIPELINE"
    RETURN_NAMES = ("pipeline", "report")
    FUNCTION = "accelerate"
    CATEGORY = CATEGORY
    OUTPUT_NODE = True
    DESCRIPTION = __doc__

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"pipeline": (cls.PIPELINE_TYPE,)},
            "optional": {
                "path": ("STRING", {"default": "", "tooltip":
                         "the engine's execution path; empty: the default (the fastest whose "
                         "contracts hold, held to the original's memory)"}),
                "warm_up": ("BOOLEAN", {"default": False, "tooltip":
                            "build every engine now and run a small request on each"}),
                "fit_memory": ("BOOLEAN", {"default": True, "tooltip":
                               "hold each request's memory to what PyTorch would use"}),
                "release_on_cpu": ("BOOLEAN", {"default": True, "tooltip":
                                   "the pipeline's low_vram .cpu() frees the engine's device "
                                   "memory"}),
                "export_glb": ("BOOLEAN", {"default": False, "tooltip":
                               "also put sparse3d's GLB export in place of "
                               "o_voxel.postprocess.to_glb"}),
                "cache_dir": ("STRING", {"default": "", "tooltip":
                              "the engine's cache folder; empty: its default"}),
            },
        }

    def accelerate(self, pipeline, path="", warm_up=False, fit_memory=True,
                   release_on_cpu=True, export_glb=False, cache_dir=""):
        _, trellis2 = _engine_modules()
        target = _unwrap_pipeline(pipeline)
        options = {"path": path or None, "warm_up": bool(warm_up),
                   "fit_memory": bool(fit_memory), "release_on_cpu": bool(release_on_cpu),
                   "export": bool(export_glb)}
        if cache_dir:
            options["cache_dir"] = cache_dir
        state = getattr(target, _STATE, None)
        if state is not None and not _still_in_place(state, target):
            state = None          # undone since (restore()): accelerated anew
        if state is not None and state["options"] == options:
            note = "already accelerated with these options: unchanged"
        else:
            note = "accelerated"
            if state is not None:
                state["acceleration"].restore()
                note = "accelerated again with new options (the first acceleration undone)"
            try:
                acc = trellis2.accelerate(target, **options)
            except Exception as e:  # the engine's refusal of an option, named by it
                text = str(e) if str(e).startswith("accelerate") else f"accelerate: {e}"
                raise Sparse3dNodeError(f"sparse3d: {text}") from e
            # What it replaced, kept here: restore() empties acc.models and acc.samplers.
            state = {"acceleration": acc, "options": options, "models": dict(acc.models),
                     "samplers": dict(acc.samplers)}
            setattr(target, _STATE, state)
        acc = state["acceleration"]
        report = f"sparse3d: {note}\n{acc.report()}\n{_fallback_lines(acc)}"
        return {"ui": {"text": [report]}, "result": (pipeline, report)}


def _still_in_place(state, pipeline) -> bool:
    """Whether what the node's acceleration replaced still stands in `pipeline` (neither
    restore() nor anything else has put another object there since)."""
    return (all(pipeline.models.get(n) is m for n, m in state["models"].items()) and
            all(getattr(pipeline, n, None) is s for n, s in state["samplers"].items()) and
            bool(state["acceleration"].models or not state["models"]))


class _ReportNode:
    """What the report nodes share: one required input (`INPUT` of type `input_type()`), an
    optional `after` of any type so that the report runs after the node it is wired to, a
    STRING output, and never cached (the counters change between runs)."""

    INPUT = "pipeline"
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("report",)
    FUNCTION = "report"
    CATEGORY = CATEGORY
    OUTPUT_NODE = True

    @classmethod
    def input_type(cls):
        raise NotImplementedError

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {cls.INPUT: (cls.input_type(),)},
                "optional": {"after": ("*", {"tooltip": "any output: runs after it"})}}

    @classmethod
    def VALIDATE_INPUTS(cls, input_types=None):
        return True   # `after` takes any type

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return float("nan")

    @staticmethod
    def shown(text: str):
        return {"ui": {"text": [text]}, "result": (text,)}


class _Trellis2Report(_ReportNode):
    """The acceleration's report now: the calls each engine served and every fallback to
    PyTorch with its reason and count. Connect `after` to the generation node's output so
    that it runs after the generation."""

    PIPELINE_TYPE = "TRELLIS2PIPELINE"
    DESCRIPTION = __doc__

    @classmethod
    def input_type(cls):
        return cls.PIPELINE_TYPE

    def report(self, pipeline, after=None):
        return self.shown(acceleration_report(pipeline))


# ---- The MODEL patch ----------------------------------------------------------------------

# The keyword arguments of a flow model call that the engine's route reads (the condition
# comes positionally, as TRELLIS.2's packs pass it, or as ComfyUI's `context=`); any other
# that is set (control, c_concat's extra inputs, ...) runs the original.
_SERVED_KEYWORDS = ("context", "transformer_options")


class EngineStepRoute:
    """ComfyUI's model_function_wrapper (ModelPatcher.set_model_unet_function_wrapper): each
    model call of the sampler runs the MODEL's own apply_model (its calculate_input, timestep,
    casts and calculate_denoised, whatever the pack's BaseModel does) with the flow model's
    forward routed through the engine for that call: one engine forward per call, bit for bit
    the engine's. A forward the engine cannot serve runs the original module with the same
    arguments, counted with the reason."""

    def __init__(self, base_model: Any, flow: Any, previous: Any = None):
        self.base_model = base_model
        self.flow = flow                 # a sparse3d_engine.trellis2.EngineFlowModel
        # Another node's model_function_wrapper set before this patch: called inside the
        # route, unchanged (the route only swaps the flow module for the call).
        self.previous = previous
        self.router = _router_class()(self)
        self.served = 0
        self.fallbacks: Counter = Counter()

    def __deepcopy__(self, memo):
        # ModelPatcher.clone() deep-copies model_options: the clones share this route (its
        # engine and its counters).
        return self

    def __call__(self, apply_model, args: Dict[str, Any]):
        base = self.base_model

        def call():
            if self.previous is not None:
                return self.previous(apply_model, args)
            return apply_model(args["input"], args["timestep"], **args.get("c", {}))

        owner = getattr(apply_model, "__self__", None)
        if owner is not None and owner is not base:
            self.fallbacks["apply_model of another model than the one patched"] += 1
            return call()
        original = base.diffusion_model
        if original is self.router:      # a call inside a call: already routed
            return call()
        setattr(base, "diffusion_model", self.router)
        try:
            return call()
        finally:
            setattr(base, "diffusion_model", original)

    def forward(self, x, t, args, kwargs):
        """The flow model's call, as the MODEL's apply_model makes it."""
        cond = args[0] if args else kwargs.get("context")
        reason = self._refusal(args, kwargs, cond)
        if reason is None:
            reason = self.flow._refusal(x, cond, {})
        if reason is None:
            try:
                v = self.flow._serve(x, t, cond, None)
                self.flow.stats.served("forward")
                self.served += 1
                return v
            except _unservable() as e:
                reason = f"{type(e).__name__}: {e}"
        self.fallbacks[reason] += 1
        return self.flow.original(x, t, *args, **kwargs)

    @staticmethod
    def _refusal(args, kwargs, cond) -> Optional[str]:
        if len(args) > 1:
            return f"{len(args) - 1} positional arguments after the condition"
        extra = sorted(k for k, v in kwargs.items() if k not in _SERVED_KEYWORDS and v is not None)
        if extra:
            return f"arguments the engine does not take: {', '.join(extra)}"
        if cond is None:
            return "no condition (c_crossattn)"
        options = kwargs.get("transformer_options") or {}
        patched = [k for k in ("patches", "patches_replace") if options.get(k)]
        if patched:
            return f"transformer_options carries {' and '.join(patched)} (run by PyTorch only)"
        return None

    def report(self) -> str:
        total = sum(self.fallbacks.values())
        lines = [f"{self.flow.name}: flow model calls served by the engine {self.served}, run "
                 f"on the original {total}"]
        lines += [f"  ran the original x{n}: {why}" for why, n in sorted(self.fallbacks.items())]
        return "\n".join(lines)


_ROUTER = []


def _router_class():
    """The torch module that stands in for the MODEL's diffusion_model during a routed call
    (a torch.nn.Module, as BaseModel's submodule must be): its forward is the route's, every
    attribute the BaseModel reads (dtype, ...) is the original module's."""
    if _ROUTER:
        return _ROUTER[0]
    torch = _require_torch()

    class FlowRouter(torch.nn.Module):
        def __init__(self, route):
            super().__init__()
            object.__setattr__(self, "_route", route)   # not a submodule

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                if name.startswith("__"):
                    raise
                return getattr(self.__dict__["_route"].flow.original, name)

        def forward(self, x, t, *args, **kwargs):
            return self._route.forward(x, t, args, kwargs)

    _ROUTER.append(FlowRouter)
    return FlowRouter


def _unservable():
    from sparse3d_engine import Error
    return (Error, AttributeError, TypeError, ValueError, LookupError)


class FlowModelPatch:
    """Routes a ComfyUI MODEL's flow model through the sparse3d engine, one engine forward per
    model call of the sampler, where the MODEL's diffusion_model is a TRELLIS.2 flow model the engine
    serves (SparseStructureFlowModel, SLatFlowModel); the MODEL is cloned, the input left as
    it is. A call the engine cannot serve runs the original module, counted in the report;
    another node's model_function_wrapper set before stays in effect around it. The engine
    keeps its own copy of the weights (ComfyUI moves the module's weights between devices)."""

    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")
    FUNCTION = "patch"
    CATEGORY = CATEGORY
    DESCRIPTION = __doc__

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"model": ("MODEL",)},
            "optional": {
                "path": ("STRING", {"default": "", "tooltip":
                         "the engine's execution path; empty: the default"}),
                "fit_memory": ("BOOLEAN", {"default": True}),
                "cache_dir": ("STRING", {"default": ""}),
            },
        }

    def patch(self, model, path="", fit_memory=True, cache_dir=""):
        s3d, trellis2 = _engine_modules()
        _require_torch()
        current = getattr(model, "model_options", {}).get("model_function_wrapper")
        if isinstance(current, EngineStepRoute):
            text = "sparse3d: already patched: unchanged\n" + current.report()
            return {"ui": {"text": [text]}, "result": (model, text)}
        base = getattr(model, "model", None)
        flow_module = getattr(base, "diffusion_model", None)
        if flow_module is None or not hasattr(base, "model_sampling"):
            raise Sparse3dNodeError("sparse3d: the MODEL has no diffusion_model/model_sampling "
                                    "(not a ComfyUI BaseModel)")
        try:
            config, source = trellis2.config_of_module(flow_module)
            if config["name"] not in s3d.model_families():
                raise s3d.Error(f"model class {config['name']!r} is not an engine family")
        except s3d.Error as e:
            raise Sparse3dNodeError(
                f"sparse3d: the MODEL's diffusion_model ({type(flow_module).__name__}) is not a "
                f"TRELLIS.2 flow model the engine serves: {e}") from None
        options: Dict[str, Any] = {}
        if cache_dir:
            options["cache_dir"] = cache_dir
        if fit_memory:
            options["fit_to_reference"] = True
            path = path or s3d.default_path() + "-cuda_graphs"
        flow = trellis2.EngineFlowModel(f"comfyui:{type(flow_module).__name__}", flow_module,
                                        config, source, path=path or None,
                                        engine_options=options, share_weights=False,
                                        release_on_cpu=False)
        patched = model.clone()
        route = EngineStepRoute(base, flow, previous=current)
        patched.set_model_unet_function_wrapper(route)
        inside = "; inside the MODEL's earlier model_function_wrapper" if current else ""
        text = (f"sparse3d: patched ({config['name']}, config from {source}{inside})\n"
                f"{route.report()}")
        return {"ui": {"text": [text]}, "result": (patched, text)}


class FlowModelPatchReport(_ReportNode):
    """The flow model patch's counters now (calls served, fallbacks with reasons)."""

    INPUT = "model"
    DESCRIPTION = __doc__

    @classmethod
    def input_type(cls):
        return "MODEL"

    def report(self, model, after=None):
        route = getattr(model, "model_options", {}).get("model_function_wrapper")
        return self.shown(route.report() if isinstance(route, EngineStepRoute)
                          else "sparse3d: this MODEL is not patched by the sparse3d flow model patch")


def _per_type(base, type_string):
    return type(f"{base.__name__.lstrip('_')}_{type_string}", (base,),
                {"PIPELINE_TYPE": type_string,
                 "RETURN_TYPES": (type_string, "STRING") if base is _AccelerateTrellis2
                 else ("STRING",)})


NODE_CLASS_MAPPINGS: Dict[str, type] = {}
NODE_DISPLAY_NAME_MAPPINGS: Dict[str, str] = {}
for _type in PIPELINE_TYPES:
    NODE_CLASS_MAPPINGS[f"Sparse3dAccelerateTrellis2_{_type}"] = _per_type(_AccelerateTrellis2, _type)
    NODE_DISPLAY_NAME_MAPPINGS[f"Sparse3dAccelerateTrellis2_{_type}"] = (
        f"sparse3d: accelerate TRELLIS.2 pipeline ({_type})")
    NODE_CLASS_MAPPINGS[f"Sparse3dTrellis2Report_{_type}"] = _per_type(_Trellis2Report, _type)
    NODE_DISPLAY_NAME_MAPPINGS[f"Sparse3dTrellis2Report_{_type}"] = (
        f"sparse3d: acceleration report ({_type})")
NODE_CLASS_MAPPINGS["Sparse3dFlowModelPatch"] = FlowModelPatch
NODE_DISPLAY_NAME_MAPPINGS["Sparse3dFlowModelPatch"] = "sparse3d: flow model patch"
NODE_CLASS_MAPPINGS["Sparse3dFlowModelPatchReport"] = FlowModelPatchReport
NODE_DISPLAY_NAME_MAPPINGS["Sparse3dFlowModelPatchReport"] = "sparse3d: flow model patch report"
