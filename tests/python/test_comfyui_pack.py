"""The ComfyUI node pack (integrations/comfyui/sparse3d_comfyui): it imports (also without
sparse3d_engine and torch), its mappings keep ComfyUI's node contract, the accelerate node
serves the stand-in TRELLIS.2 pipeline of test_trellis2.py bit for bit as the engine and is
idempotent, the flow model patch routes a MODEL's steps through the engine with counted
fallbacks (torch needed: skipped without it), the errors name their cause. With COMFYUI_DIR
pointing at a ComfyUI source tree, a prompt graph runs through ComfyUI's own PromptExecutor
on the CPU (comfyui_headless.py, in a subprocess). Nothing here needs a GPU or the network."""
import copy
import os
import subprocess
import sys

import numpy as np
import pytest

import sparse3d_engine as s3d
import sparse3d_engine.trellis2 as t2
import test_trellis2 as standins   # the duck-typed pipeline, modules and sampler, shared
from conftest import TINY

HERE = os.path.dirname(os.path.abspath(__file__))
PACK_PARENT = os.path.join(HERE, "..", "..", "integrations", "comfyui")
PACK_DIR = os.path.join(PACK_PARENT, "sparse3d_comfyui")
if PACK_PARENT not in sys.path:
    sys.path.insert(0, PACK_PARENT)

import sparse3d_comfyui  # noqa: E402
from sparse3d_comfyui import nodes as pack  # noqa: E402

ACCELERATE = "Sparse3dAccelerateTrellis2_TRELLIS2PIPELINE"
ACCELERATE_DICT = "Sparse3dAccelerateTrellis2_TRELLIS2_PIPELINE"
REPORT = "Sparse3dTrellis2Report_TRELLIS2PIPELINE"


def node(name):
    return sparse3d_comfyui.NODE_CLASS_MAPPINGS[name]()


def run(name, **inputs):
    """A node's function called as ComfyUI calls it; (result tuple, ui dict or None)."""
    cls = sparse3d_comfyui.NODE_CLASS_MAPPINGS[name]
    out = getattr(cls(), cls.FUNCTION)(**inputs)
    if isinstance(out, dict):
        return out["result"], out.get("ui")
    return out, None


# ---- The node contract --------------------------------------------------------------------

def test_the_mappings_keep_comfyuis_node_contract():
    classes = sparse3d_comfyui.NODE_CLASS_MAPPINGS
    names = sparse3d_comfyui.NODE_DISPLAY_NAME_MAPPINGS
    assert set(names) == set(classes)
    assert "sparse3d: flow model patch" in names.values()
    assert sum(v.startswith("sparse3d: accelerate TRELLIS.2 pipeline") for v in names.values()) \
        == len(sparse3d_comfyui.PIPELINE_TYPES) == 2
    for key, cls in classes.items():
        spec = cls.INPUT_TYPES()
        assert set(spec) <= {"required", "optional", "hidden"} and spec["required"], key
        for section in spec.values():
            for input_name, entry in section.items():
                assert isinstance(input_name, str) and isinstance(entry, tuple), (key, input_name)
                assert isinstance(entry[0], (str, list)), (key, input_name)
                if len(entry) > 1:
                    assert isinstance(entry[1], dict)
        assert isinstance(cls.RETURN_TYPES, tuple) and all(isinstance(t, str) for t in cls.RETURN_TYPES)
        assert len(cls.RETURN_NAMES) == len(cls.RETURN_TYPES)
        assert callable(getattr(cls, cls.FUNCTION)), key
        assert cls.CATEGORY == "sparse3d"
        # Every required and optional input is a keyword of the function (ComfyUI calls it so).
        import inspect
        params = inspect.signature(getattr(cls, cls.FUNCTION)).parameters
        for section in ("required", "optional"):
            assert set(spec.get(section, {})) <= set(params), key
    # One accelerate node per type string, taking and returning that type.
    for t in sparse3d_comfyui.PIPELINE_TYPES:
        cls = classes[f"Sparse3dAccelerateTrellis2_{t}"]
        assert cls.INPUT_TYPES()["required"]["pipeline"] == (t,)
        assert cls.RETURN_TYPES == (t, "STRING")
    assert classes["Sparse3dFlowModelPatch"].RETURN_TYPES == ("MODEL", "STRING")


def test_the_pack_imports_without_sparse3d_engine_and_torch_and_says_what_to_install():
    script = (
        "import sys\n"
        "sys.modules['sparse3d_engine'] = None\n"
        "sys.modules['torch'] = None\n"
        f"sys.path.insert(0, {os.path.abspath(PACK_PARENT)!r})\n"
        "import sparse3d_comfyui as p\n"
        "assert len(p.NODE_CLASS_MAPPINGS) == 6\n"
        "for name in ('Sparse3dAccelerateTrellis2_TRELLIS2PIPELINE', 'Sparse3dFlowModelPatch'):\n"
        "    cls = p.NODE_CLASS_MAPPINGS[name]\n"
        "    try:\n"
        "        getattr(cls(), cls.FUNCTION)(object())\n"
        "    except p.nodes.Sparse3dNodeError as e:\n"
        "        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("sparse3d: the sparse3d_engine package does not import")
        assert "pip install sparse3d-engine-cu12" in line and "sparse3d-engine-cu13" in line


# ---- The accelerate node ------------------------------------------------------------------

@pytest.fixture
def pipeline(tiny_config, tiny_state_dict):
    return standins.Pipeline(standins.OriginalModule(tiny_config, tiny_state_dict))


def test_the_accelerate_node_serves_the_pipeline_bit_for_bit_as_the_engine(pipeline, cache_dir):
    (same, report), ui = run(ACCELERATE, pipeline=pipeline, cache_dir=cache_dir)
    assert same is pipeline
    model = pipeline.models["shape_slat_flow_model_512"]
    assert isinstance(model, t2.EngineFlowModel)
    assert isinstance(pipeline.shape_slat_sampler, t2.EngineSampler)
    assert ui["text"] == [report]
    assert report.startswith("sparse3d: accelerated\n")
    assert "shape_slat_flow_model_512: sparse3d engine" in report and "fallbacks to PyTorch: 0" in report

    noise, cond = standins.request()
    out = pipeline.shape_slat_sampler.sample(model, noise, cond, np.zeros_like(cond),
                                             **standins.PARAMS)
    direct = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir).sample(
        noise.coords, cond, noise=noise.feats, sampler=s3d.SamplerSettings(steps=4))
    np.testing.assert_array_equal(out.samples.feats, direct)
    assert model.original.calls == 0 and pipeline.shape_slat_sampler.original.loops == 0
    (text,), _ = run(REPORT, pipeline=pipeline, after="anything")
    assert "whole loops in the engine 1" in text and "fallbacks to PyTorch: 0" in text


def test_the_accelerate_node_is_idempotent(pipeline, cache_dir):
    run(ACCELERATE, pipeline=pipeline, cache_dir=cache_dir)
    model = pipeline.models["shape_slat_flow_model_512"]
    sampler = pipeline.shape_slat_sampler
    acc = pipeline._sparse3d_comfyui["acceleration"]
    (same, report), _ = run(ACCELERATE, pipeline=pipeline, cache_dir=cache_dir)
    assert same is pipeline and "already accelerated with these options: unchanged" in report
    assert pipeline.models["shape_slat_flow_model_512"] is model
    assert pipeline.shape_slat_sampler is sampler
    assert pipeline._sparse3d_comfyui["acceleration"] is acc
    # Other options: undone, then accelerated again; never wrapped twice.
    (_, report), _ = run(ACCELERATE, pipeline=pipeline, cache_dir=cache_dir, fit_memory=False)
    assert "accelerated again with new options" in report
    again = pipeline.models["shape_slat_flow_model_512"]
    assert isinstance(again, t2.EngineFlowModel) and again is not model
    assert not isinstance(again.original, t2.EngineFlowModel)
    assert not isinstance(pipeline.shape_slat_sampler.original, t2.EngineSampler)
    # Undone by hand: the node accelerates anew.
    pipeline._sparse3d_comfyui["acceleration"].restore()
    (_, report), _ = run(ACCELERATE, pipeline=pipeline, cache_dir=cache_dir, fit_memory=False)
    assert report.startswith("sparse3d: accelerated\n")
    assert isinstance(pipeline.models["shape_slat_flow_model_512"], t2.EngineFlowModel)


def test_the_dict_form_and_the_fallbacks_in_the_report(pipeline, cache_dir):
    holder = {"pipeline": pipeline, "model_name": "microsoft/TRELLIS.2-4B"}
    (same, _), _ = run(ACCELERATE_DICT, pipeline=holder, cache_dir=cache_dir)
    assert same is holder
    model = pipeline.models["shape_slat_flow_model_512"]
    assert isinstance(model, t2.EngineFlowModel)
    noise, cond = standins.request()
    # A negative condition that is not zero: the original sampler runs (counted).
    pipeline.shape_slat_sampler.sample(model, noise, cond, np.ones_like(cond), **standins.PARAMS)
    (text,), ui = run("Sparse3dTrellis2Report_TRELLIS2_PIPELINE", pipeline=holder)
    assert ui["text"] == [text]
    assert "whole loops in the engine 0" in text
    assert "ran the original sampler x1" in text
    total = int(text.split("fallbacks to PyTorch: ")[1].split()[0])
    assert total == sum(f["count"] for f in pipeline._sparse3d_comfyui["acceleration"].fallbacks())
    assert total == 1


def test_the_accelerate_node_names_what_it_cannot_take(pipeline, cache_dir):
    with pytest.raises(pack.Sparse3dNodeError, match="holds no loaded pipeline"):
        run(ACCELERATE_DICT, pipeline={"pipeline": None, "model_name": "x"})
    with pytest.raises(pack.Sparse3dNodeError, match="a dict without a \"pipeline\" entry"):
        run(ACCELERATE_DICT, pipeline={"config": 1})
    with pytest.raises(pack.Sparse3dNodeError, match=r"the input \(object\) has no `models` dict"):
        run(ACCELERATE, pipeline=object())
    (text,), _ = run(REPORT, pipeline=pipeline)
    assert text == "sparse3d: this pipeline was not accelerated by the sparse3d node"
    # accelerate()'s own refusal, before anything is replaced, named as it names it.
    pipeline.device = "tpu:0"
    with pytest.raises(pack.Sparse3dNodeError, match=r"^sparse3d: accelerate: warm_up runs on "
                                                     r"the pipeline's device, and device must"):
        run(ACCELERATE, pipeline=pipeline, warm_up=True, cache_dir=cache_dir)
    assert not isinstance(pipeline.models["shape_slat_flow_model_512"], t2.EngineFlowModel)
    del pipeline.device
    # A path the engine does not have: the engine refuses it when it is built, and that is a
    # counted fallback in the report, not an error of the node.
    run(ACCELERATE, pipeline=pipeline, path="no-such-path", cache_dir=cache_dir)
    noise, cond = standins.request()
    model = pipeline.models["shape_slat_flow_model_512"]
    pipeline.shape_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), **standins.PARAMS)
    (text,), _ = run(REPORT, pipeline=pipeline)
    assert "fallbacks to PyTorch: 0" not in text and "no-such-path" in text
    assert pipeline.shape_slat_sampler.original.loops == 1


def test_a_missing_engine_is_one_clear_error(pipeline, monkeypatch):
    monkeypatch.setitem(sys.modules, "sparse3d_engine", None)
    monkeypatch.setitem(sys.modules, "sparse3d_engine.trellis2", None)
    for name, inputs in ((ACCELERATE, {"pipeline": pipeline}),
                         ("Sparse3dFlowModelPatch", {"model": object()})):
        with pytest.raises(pack.Sparse3dNodeError,
                           match="sparse3d_engine package does not import.*pip install "
                                 "sparse3d-engine-cu12"):
            run(name, **inputs)
    assert not isinstance(pipeline.models["shape_slat_flow_model_512"], t2.EngineFlowModel)


# ---- The flow model patch (torch) ---------------------------------------------------------

class ModelSampling:
    """ComfyUI's flow model sampling as TRELLIS.2's native MODEL uses it (CONST,
    ModelSamplingDiscreteFlow with multiplier 1000)."""

    def calculate_input(self, sigma, x):
        return x

    def timestep(self, sigma):
        return sigma * 1000

    def calculate_denoised(self, sigma, out, x):
        return x - out * sigma.reshape(sigma.shape[:1] + (1,) * (out.ndim - 1))


class BaseModel:
    """comfy.model_base.BaseModel as the patch reads it: diffusion_model, model_sampling and
    apply_model, which makes the flow model's call as BaseModel._apply_model does (the
    condition as `context=`, control and transformer_options beside it)."""

    def __init__(self, diffusion_model):
        self.diffusion_model = diffusion_model
        self.model_sampling = ModelSampling()

    def apply_model(self, x, t, c_concat=None, c_crossattn=None, control=None,
                    transformer_options={}, **kwargs):
        import torch
        xc = self.model_sampling.calculate_input(t, x)
        if c_concat is not None:
            xc = torch.cat([xc, c_concat], dim=1)
        out = self.diffusion_model(xc, self.model_sampling.timestep(t).float(),
                                   context=c_crossattn, control=control,
                                   transformer_options=transformer_options, **kwargs)
        return self.model_sampling.calculate_denoised(t, out.float(), x)


class TorchSparseStructureFlowModel(standins.SparseStructureFlowModel):
    """test_trellis2's dense stand-in called on torch tensors: records each call's arguments
    and returns a marker velocity of 0.25."""

    def __call__(self, x, t, cond=None, **kwargs):
        import torch
        self.calls += 1
        self.last = (x, t, cond, kwargs)
        return torch.full_like(x[:, :self.out_channels], 0.25)


class ModelPatcher:
    """comfy.model_patcher.ModelPatcher as the patch uses it: clone() deep-copies
    model_options, as ComfyUI's does."""

    def __init__(self, model):
        self.model = model
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = ModelPatcher(self.model)
        n.model_options = copy.deepcopy(self.model_options)
        return n

    def set_model_unet_function_wrapper(self, f):
        self.model_options["model_function_wrapper"] = f


def _dense_model(dense_config, dense_state_dict):
    return ModelPatcher(BaseModel(TorchSparseStructureFlowModel(dense_config, dense_state_dict)))


def _call(patched, x, sigma, **c):
    """A model call as comfy.samplers.calc_cond_batch makes it through the wrapper."""
    c.setdefault("transformer_options", {})
    return patched.model_options["model_function_wrapper"](
        patched.model.apply_model, {"input": x, "timestep": sigma, "c": c,
                                    "cond_or_uncond": [0] * len(x)})


def test_the_patch_serves_each_call_from_the_engine_bit_for_bit(dense_config, dense_state_dict,
                                                                cache_dir):
    torch = pytest.importorskip("torch")
    model = _dense_model(dense_config, dense_state_dict)
    (patched, report), ui = run("Sparse3dFlowModelPatch", model=model, cache_dir=cache_dir,
                                fit_memory=False)
    assert patched is not model and "model_function_wrapper" not in model.model_options
    assert "patched (SparseStructureFlowModel" in report and ui["text"] == [report]
    noise, cond = standins.dense_request(2, seed=5)
    x, c = torch.from_numpy(noise), torch.from_numpy(cond)
    sigma = torch.tensor([0.75, 0.75])
    out = _call(patched, x, sigma, c_crossattn=c)
    flow_module = model.model.diffusion_model
    assert flow_module is patched.model.diffusion_model   # put back after the call
    config, _ = t2.config_of_module(flow_module)
    engine = s3d.Engine.from_state_dict(config, t2._weights(dense_state_dict), device="cpu",
                                        cache_dir=cache_dir)
    v = engine.forward(noise, np.full((2,), 750.0, np.float32), cond)
    expected = x - torch.from_numpy(np.asarray(v)).float() * sigma.reshape(2, 1, 1, 1, 1)
    assert torch.equal(out, expected)
    assert flow_module.calls == 0
    # A clone (KSampler clones the MODEL) shares the route and its counters.
    clone = patched.clone()
    _call(clone, x, sigma, c_crossattn=c)
    (text,), _ = run("Sparse3dFlowModelPatchReport", model=patched)
    assert "flow model calls served by the engine 2, run on the original 0" in text


def test_what_the_patch_cannot_serve_runs_the_original_counted(dense_config, dense_state_dict,
                                                               tiny_config, tiny_state_dict,
                                                               cache_dir):
    torch = pytest.importorskip("torch")
    model = _dense_model(dense_config, dense_state_dict)
    (patched, _), _ = run("Sparse3dFlowModelPatch", model=model, cache_dir=cache_dir)
    noise, cond = standins.dense_request(1, seed=6)
    x, c = torch.from_numpy(noise), torch.from_numpy(cond)
    sigma = torch.tensor([0.5])
    marker = x - 0.25 * 0.5        # the original's velocity 0.25, denoised
    flow_module = model.model.diffusion_model
    assert torch.equal(_call(patched, x, sigma, c_crossattn=c, c_concat=x[:, :1]), marker)
    assert flow_module.last[0].shape[1] == 9     # the original got the concatenated input
    assert torch.equal(_call(patched, x, sigma, c_crossattn=c, control={"middle": [x]}), marker)
    assert flow_module.last[3]["control"] == {"middle": [x]}
    assert torch.equal(_call(patched, x, sigma, c_crossattn=c,
                             transformer_options={"patches": {"attn1_patch": [abs]}}), marker)
    assert torch.equal(_call(patched, x, sigma), marker)
    assert flow_module.calls == 4
    (text,), _ = run("Sparse3dFlowModelPatchReport", model=patched)
    assert "flow model calls served by the engine 0, run on the original 4" in text
    assert "x must be f32 or bf16[1, 8, 8, 8, 8] (the volume; no coords given), got " \
        "f32[1, 9, 8, 8, 8]" in text    # c_concat: the engine's own refusal
    assert "arguments the engine does not take: control" in text
    assert "transformer_options carries patches" in text
    assert "no condition (c_crossattn)" in text
    # A SLat model given ComfyUI's dense latent: counted, never an error.
    slat = ModelPatcher(BaseModel(TorchSlat(tiny_config, tiny_state_dict)))
    (patched, _), _ = run("Sparse3dFlowModelPatch", model=slat, cache_dir=cache_dir)
    _call(patched, x, sigma, c_crossattn=c)
    assert "x is not a SparseTensor" in patched.model_options["model_function_wrapper"].report()


class TorchSlat(standins.OriginalModule):
    def __call__(self, x, t, cond=None, **kwargs):
        import torch
        self.calls += 1
        return torch.zeros_like(x)


def test_the_patch_keeps_an_earlier_wrapper_and_refuses_what_it_cannot_route(
        dense_config, dense_state_dict, cache_dir):
    torch = pytest.importorskip("torch")
    model = _dense_model(dense_config, dense_state_dict)
    (patched, _), _ = run("Sparse3dFlowModelPatch", model=model, cache_dir=cache_dir)
    (again, text), _ = run("Sparse3dFlowModelPatch", model=patched, cache_dir=cache_dir)
    assert again is patched and text.startswith("sparse3d: already patched: unchanged")
    # Another node's wrapper set before: it still wraps each call, the flow model inside it
    # is the engine's.
    earlier = model.clone()
    seen = []

    def doubled(apply_model, args):
        seen.append(args["timestep"])
        return 2 * apply_model(args["input"], args["timestep"], **args["c"])

    earlier.set_model_unet_function_wrapper(doubled)
    (chained, text), _ = run("Sparse3dFlowModelPatch", model=earlier, cache_dir=cache_dir,
                             fit_memory=False)
    assert "inside the MODEL's earlier model_function_wrapper" in text
    noise, cond = standins.dense_request(1, seed=7)
    x, c = torch.from_numpy(noise), torch.from_numpy(cond)
    sigma = torch.tensor([0.5])
    out = _call(chained, x, sigma, c_crossattn=c)
    plain = _call(run("Sparse3dFlowModelPatch", model=model, cache_dir=cache_dir,
                      fit_memory=False)[0][0], x, sigma, c_crossattn=c)
    assert len(seen) == 1 and torch.equal(out, 2 * plain)
    assert "served by the engine 1, run on the original 0" in \
        chained.model_options["model_function_wrapper"].report()
    with pytest.raises(pack.Sparse3dNodeError, match="not a TRELLIS.2 flow model the engine "
                                                     "serves: the module has no resolution"):
        run("Sparse3dFlowModelPatch", model=ModelPatcher(BaseModel(object())))
    with pytest.raises(pack.Sparse3dNodeError, match="not a ComfyUI BaseModel"):
        run("Sparse3dFlowModelPatch", model=object())
    (text,), _ = run("Sparse3dFlowModelPatchReport", model=model)
    assert "is not patched" in text


# ---- ComfyUI's own executor ---------------------------------------------------------------

@pytest.mark.skipif(not os.environ.get("COMFYUI_DIR"),
                    reason="COMFYUI_DIR (a ComfyUI source tree) not set")
def test_a_prompt_runs_through_comfyuis_own_executor(tmp_path):
    pytest.importorskip("torch")
    env = dict(os.environ, SPARSE3D_COMFY_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, os.path.join(HERE, "comfyui_headless.py"),
                          os.environ["COMFYUI_DIR"], os.path.abspath(PACK_DIR)],
                         capture_output=True, text=True, timeout=600, env=env)
    print(out.stdout[-4000:], out.stderr[-4000:])
    assert out.returncode == 0, out.stderr[-4000:]
    assert "comfyui_headless: ok" in out.stdout
