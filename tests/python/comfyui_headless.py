"""Runs a prompt graph through ComfyUI's own executor, headless (no server):
python comfyui_headless.py COMFYUI_DIR PACK_DIR. Used by test_comfyui_pack.py when
COMFYUI_DIR is set; prints "comfyui_headless: ok" at the end when every check held. On the CPU
(ComfyUI's --cpu), or with SPARSE3D_COMFY_DEVICE=cuda on the GPU: ComfyUI on its CUDA device,
the requests as torch CUDA tensors (so the engines run there), the engines compared against
direct engines on the GPU with the same options.

The graph: a stand-in loader node (defined here) returns the stand-in TRELLIS.2 pipeline of
test_trellis2.py under the type string TRELLIS2PIPELINE; the pack's accelerate node takes it;
a stand-in generation node (defined here) runs the pipeline's shape sampler on a fixed
request and returns the latent's digest; the pack's report node runs after it. The pack is
loaded by ComfyUI's own loader (nodes.load_custom_node), the prompt validated by
execution.validate_prompt and run by execution.PromptExecutor. The latent is compared bit
for bit with the engine's direct Engine.sample on the same request; then the same prompt is
queued again (ComfyUI's caches: nothing re-runs but the report) and once more with another
option (the accelerate node re-runs over the cached pipeline: accelerated again, not twice)."""
import asyncio
import hashlib
import os
import sys

DEVICE = os.environ.get("SPARSE3D_COMFY_DEVICE", "cpu")


def main(comfy_dir, pack_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    os.chdir(comfy_dir)
    sys.path[:0] = [comfy_dir, here]
    # Folders after everything else (SPARSE3D_COMFY_EXTRA_PATH, os.pathsep-separated): stand-ins
    # for modules ComfyUI imports at start-up and these graphs never use (scipy, av,
    # torchvision), on a machine that lacks them; an installed module still wins.
    sys.path += [p for p in os.environ.get("SPARSE3D_COMFY_EXTRA_PATH", "").split(os.pathsep) if p]
    sys.argv = [sys.argv[0]]
    from comfy.cli_args import args
    if DEVICE not in ("cpu", "cuda"):
        raise SystemExit(f"SPARSE3D_COMFY_DEVICE must be cpu or cuda, not {DEVICE!r}")
    args.cpu = DEVICE == "cpu"       # before comfy.model_management is imported
    import numpy as np
    import execution
    import nodes
    import sparse3d_engine as s3d
    import sparse3d_engine.trellis2 as t2
    import conftest
    import test_trellis2 as standins

    assert asyncio.run(nodes.load_custom_node(pack_dir)), "ComfyUI did not load the pack"
    loaded = sorted(k for k in nodes.NODE_CLASS_MAPPINGS if k.startswith("Sparse3d"))
    print("loaded by nodes.load_custom_node:", ", ".join(loaded))

    cache = os.environ.get("SPARSE3D_COMFY_CACHE", os.path.join(comfy_dir, "temp", "s3d"))
    noise, cond = standins.request()
    seen = {"pipelines": []}
    nodes.NODE_CLASS_MAPPINGS.update(pipeline_nodes(conftest, standins, noise, cond, seen))

    def prompt(fit_memory):
        return {
            "1": {"class_type": "StandInLoader", "inputs": {}},
            "2": {"class_type": "Sparse3dAccelerateTrellis2_TRELLIS2PIPELINE",
                  "inputs": {"pipeline": ["1", 0], "cache_dir": cache, "fit_memory": fit_memory,
                             "warm_up": False, "path": ""}},
            "3": {"class_type": "StandInGenerate", "inputs": {"pipeline": ["2", 0]}},
            "4": {"class_type": "Sparse3dTrellis2Report_TRELLIS2PIPELINE",
                  "inputs": {"pipeline": ["2", 0], "after": ["3", 0]}},
        }

    run = runner(execution)
    out = run(prompt(True), "first")
    accelerate_text = out["2"]["text"][0]
    report = out["4"]["text"][0]
    print("accelerate node ui text:\n" + accelerate_text)
    print("report node ui text:\n" + report)
    pipeline = seen["pipelines"][0]
    assert isinstance(pipeline.models["shape_slat_flow_model_512"], t2.EngineFlowModel)
    def direct_sample(fit):
        # The node's options (fit_memory: fit_to_reference, which may turn costly flags off
        # for the request): on the GPU those choose the kernels, so the bits.
        options = {"fit_to_reference": True} if fit else {}
        return s3d.Engine(conftest.TINY, device=DEVICE, cache_dir=cache, **options).sample(
            noise.coords, cond, noise=noise.feats, sampler=s3d.SamplerSettings(steps=4))
    direct = direct_sample(True)
    np.testing.assert_array_equal(seen["latent"], direct)
    print("latent: bit for bit Engine.sample (sha256 %s)" % out["3"]["text"][0])
    assert "whole loops in the engine 1" in report and "fallbacks to PyTorch: 0" in report

    out = run(prompt(True), "again")   # cached: only the report (IS_CHANGED nan) runs
    assert len(seen["pipelines"]) == 1 and "whole loops in the engine 1" in out["4"]["text"][0]
    out = run(prompt(False), "new-option")
    assert len(seen["pipelines"]) == 1
    text = out["2"]["text"][0]
    assert "accelerated again with new options" in text, text
    model = pipeline.models["shape_slat_flow_model_512"]
    assert isinstance(model, t2.EngineFlowModel) and not isinstance(model.original, t2.EngineFlowModel)
    assert not isinstance(pipeline.shape_slat_sampler.original, t2.EngineSampler)
    np.testing.assert_array_equal(seen["latent"], direct_sample(False))
    print("new-option: " + text.splitlines()[0] + "; latent again bit for bit")
    model_patch(nodes, run, conftest, standins, cache)
    print("comfyui_headless: ok")


def pipeline_nodes(conftest, standins, noise, cond, seen):
    """The stand-in loader (the stand-in pipeline of test_trellis2.py under TRELLIS2PIPELINE)
    and generation node (the shape sampler on a fixed request; the latent's digest)."""
    import numpy as np
    tiny_config = __import__("json").load(open(conftest.TINY))
    tiny_sd = conftest.read_safetensors(conftest.TINY[:-len(".json")] + ".safetensors")

    class StandInLoader:
        RETURN_TYPES = ("TRELLIS2PIPELINE",)
        FUNCTION = "load"
        CATEGORY = "test"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}}

        def load(self):
            p = standins.Pipeline(standins.OriginalModule(tiny_config, tiny_sd))
            seen["pipelines"].append(p)
            return (p,)

    class StandInGenerate:
        RETURN_TYPES = ("STRING",)
        FUNCTION = "generate"
        CATEGORY = "test"
        OUTPUT_NODE = True

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"pipeline": ("TRELLIS2PIPELINE",)}}

        def generate(self, pipeline):
            model = pipeline.models["shape_slat_flow_model_512"]
            x, c, neg = noise, cond, np.zeros_like(cond)
            if DEVICE == "cuda":  # as a pipeline on the GPU hands them over: torch on the device
                import torch

                def cuda(a):
                    return torch.from_numpy(np.ascontiguousarray(a)).cuda()
                x = conftest.SparseTensor(cuda(noise.feats), cuda(noise.coords))
                c, neg = cuda(cond), cuda(np.zeros_like(cond))
            out = pipeline.shape_slat_sampler.sample(model, x, c, neg,
                                                     **standins.PARAMS)
            feats = out.samples.feats
            seen["latent"] = feats.cpu().numpy() if hasattr(feats, "cpu") else feats
            digest = hashlib.sha256(np.ascontiguousarray(seen["latent"]).tobytes()).hexdigest()
            return {"ui": {"text": [digest]}, "result": (digest,)}

    return {"StandInLoader": StandInLoader, "StandInGenerate": StandInGenerate}


def runner(execution):
    """run(prompt, prompt_id) -> the outputs of ComfyUI's own validate_prompt and
    PromptExecutor, headless (a stand-in for what the executor reads of PromptServer)."""

    class Server:
        client_id = None
        last_node_id = None
        messages = []

        def send_sync(self, event, data, sid=None):
            self.messages.append((event, data))

        def queue_updated(self):
            pass

    executor = execution.PromptExecutor(Server(), cache_type=execution.CacheType.CLASSIC)

    def run(p, prompt_id):
        valid, error, outputs, node_errors = asyncio.run(
            execution.validate_prompt(prompt_id, p, None))
        assert valid, (error, node_errors)
        executor.execute(p, prompt_id, {}, outputs)
        events = [e for e, _ in executor.status_messages]
        assert executor.success, executor.status_messages
        print(f"{prompt_id}: validate_prompt ok (outputs {sorted(outputs)}); events {events}")
        return executor.history_result["outputs"]

    return run


def model_patch(nodes, run, conftest, standins, cache):
    """The flow model patch under ComfyUI's own KSampler: a real comfy.model_base.BaseModel
    (ModelType.FLOW: CONST, ModelSamplingDiscreteFlow) and ModelPatcher over a stand-in
    SparseStructureFlowModel (the tiny dense checkpoint of conftest.py); the patched MODEL's
    latent against the unpatched MODEL whose stand-in forward calls an engine directly (the
    same casts as BaseModel._apply_model): bit for bit, every step served by the engine."""
    import torch
    calls = {"original": 0}
    seen = {}
    make_model = flow_model_standin(conftest, standins, cache, calls)
    noise, cond = standins.dense_request(1, seed=9)
    nodes.NODE_CLASS_MAPPINGS.update(model_patch_nodes(make_model, cond, conftest, seen))
    out = run(patch_graph(False, True, cache), "model-patch")
    report = out["6"]["text"][0]
    print("flow model patch node ui text:\n" + out["3"]["text"][0])
    print("flow model patch report (after KSampler):\n" + report)
    assert calls["original"] == 0, calls
    assert "flow model calls served by the engine 4, run on the original 0" in report, report
    run(patch_graph(True, False, cache), "model-oracle")
    assert calls["original"] == 4, calls
    assert torch.equal(seen["patched"], seen["oracle"])
    print("KSampler latent through the patch: bit for bit the unpatched MODEL whose forward "
          "is the engine (4 steps, cfg 3.0, euler/simple)")


def flow_model_standin(conftest, standins, cache, calls):
    """make_model(oracle): a ComfyUI ModelPatcher over a real BaseModel (FLOW) whose
    diffusion_model stands for a pack's SparseStructureFlowModel on the tiny dense checkpoint;
    its forward counts calls["original"] and is the engine called directly when `oracle`."""
    import numpy as np
    import torch
    import comfy.latent_formats
    import comfy.model_base
    import comfy.model_patcher
    import comfy.supported_models_base
    import sparse3d_engine as s3d

    tiny_config = __import__("json").load(open(conftest.TINY))
    args = {k: v for k, v in tiny_config["args"].items() if k != "rope_freq"}
    args.update(resolution=conftest.DENSE_R, in_channels=conftest.DENSE_C,
                out_channels=conftest.DENSE_C)
    sd = conftest.read_safetensors(conftest.TINY[:-len(".json")] + ".safetensors")
    sd["input_layer.weight"] = np.ascontiguousarray(sd["input_layer.weight"][:, :conftest.DENSE_C])
    sd["out_layer.weight"] = np.ascontiguousarray(sd["out_layer.weight"][:conftest.DENSE_C])
    sd["out_layer.bias"] = np.ascontiguousarray(sd["out_layer.bias"][:conftest.DENSE_C])
    weights = {k: torch.from_numpy(v) for k, v in sd.items()}

    class SparseStructureFlowModel(torch.nn.Module):
        """Stands for a pack's SparseStructureFlowModel (the class name is the engine's
        family); `oracle`: its forward is the engine called directly, else a marker."""

        def __init__(self, oracle=False, device=None, operations=None, **unet_config):
            super().__init__()
            for a in standins.ARGS:
                setattr(self, a, unet_config[a])
            self.dtype = torch.float32
            self.oracle = (s3d.Engine.from_state_dict(
                {"name": "SparseStructureFlowModel", "args": dict(unet_config, dtype="float32")},
                sd, device=DEVICE, cache_dir=cache) if oracle else None)

        def state_dict(self, destination=None, prefix="", keep_vars=False):
            out = destination if destination is not None else {}
            out.update({prefix + k: v for k, v in weights.items()})
            return out

        def forward(self, x, timesteps, context=None, **kwargs):
            calls["original"] += 1
            if self.oracle is None:
                return torch.zeros_like(x)
            host = [a.detach().cpu().numpy() for a in (x, timesteps, context)]
            return torch.from_numpy(np.asarray(self.oracle.forward(*host))).to(x.device)

    class Dense3d(comfy.latent_formats.LatentFormat):
        latent_channels = conftest.DENSE_C
        latent_dimensions = 3

    class Config(comfy.supported_models_base.BASE):
        latent_format = Dense3d
        sampling_settings = {"shift": 1.0, "multiplier": 1000}
        unet_extra_config = {}      # BASE adds num_heads=-1 for UNets

    def make_model(oracle):
        config = Config(dict(args, oracle=oracle))
        base = comfy.model_base.BaseModel(config, comfy.model_base.ModelType.FLOW,
                                          device=torch.device(DEVICE),
                                          unet_model=SparseStructureFlowModel)
        return comfy.model_patcher.ModelPatcher(base, load_device=torch.device(DEVICE),
                                                offload_device=torch.device("cpu"))

    return make_model


def model_patch_nodes(make_model, cond, conftest, seen):
    """Stand-in nodes: the MODEL loader, the conditioning and empty latent, and a sink that
    keeps the sampled latent in seen[name]."""
    import torch

    class StandInSSModel:
        RETURN_TYPES = ("MODEL",)
        FUNCTION = "load"
        CATEGORY = "test"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"oracle": ("BOOLEAN", {"default": False})}}

        def load(self, oracle):
            return (make_model(oracle),)

    class StandInConditioning:
        RETURN_TYPES = ("CONDITIONING", "CONDITIONING", "LATENT")
        FUNCTION = "make"
        CATEGORY = "test"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}}

        def make(self):
            c = torch.from_numpy(cond)
            latent = torch.zeros((1, conftest.DENSE_C) + (conftest.DENSE_R,) * 3)
            return ([[c, {}]], [[torch.zeros_like(c), {}]], {"samples": latent})

    class StandInKeep:
        RETURN_TYPES = ("STRING",)
        FUNCTION = "keep"
        CATEGORY = "test"
        OUTPUT_NODE = True

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"samples": ("LATENT",), "name": ("STRING", {"default": ""})}}

        def keep(self, samples, name):
            seen[name] = samples["samples"].clone()
            return {"ui": {"text": [name]}, "result": (name,)}

    return {"StandInSSModel": StandInSSModel, "StandInConditioning": StandInConditioning,
            "StandInKeep": StandInKeep}


def patch_graph(oracle, patch, cache):
    """The KSampler graph over the stand-in MODEL, through the patch (and its report) or not."""
    g = {"1": {"class_type": "StandInSSModel", "inputs": {"oracle": oracle}},
         "2": {"class_type": "StandInConditioning", "inputs": {}},
         "4": {"class_type": "KSampler", "inputs": {
             "model": ["3", 0] if patch else ["1", 0], "seed": 7, "steps": 4, "cfg": 3.0,
             "sampler_name": "euler", "scheduler": "simple", "positive": ["2", 0],
             "negative": ["2", 1], "latent_image": ["2", 2], "denoise": 1.0}},
         "5": {"class_type": "StandInKeep", "inputs": {
             "samples": ["4", 0], "name": "patched" if patch else "oracle"}}}
    if patch:
        g["3"] = {"class_type": "Sparse3dFlowModelPatch",
                  "inputs": {"model": ["1", 0], "cache_dir": cache, "fit_memory": False}}
        g["6"] = {"class_type": "Sparse3dFlowModelPatchReport",
                  "inputs": {"model": ["3", 0], "after": ["5", 0]}}
    return g


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
