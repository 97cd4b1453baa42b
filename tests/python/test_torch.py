"""The package with PyTorch tensors: zero copy both ways, the caller's stream, a module's
state dict, the drop-in's .cpu()/.to() and dtype handling. CPU tensors everywhere torch is
installed; CUDA tensors where a GPU is (the H200 runs these from the installed wheel)."""
import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (CI: its wheel brings gigabytes of CUDA "
                    "libraries); the NumPy tests cover the API, the GPU machine runs these")

import sparse3d  # noqa: E402
import sparse3d.trellis2 as t2  # noqa: E402
from conftest import TINY, SparseTensor, make_request  # noqa: E402

QUICK = sparse3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def engine_on(device, cache_dir):
    return sparse3d.Engine(TINY, device=device, cache_dir=cache_dir)


def inputs(device, counts=(70, 45), seed=1):
    coords, cond = make_request(list(counts), seed)
    coords, cond = torch.from_numpy(coords).to(device), torch.from_numpy(cond).to(device)
    noise = torch.from_numpy(sparse3d.draw_noise(seed, coords.shape[0], 32)).to(device)
    return coords, cond, noise


@pytest.mark.parametrize("device", DEVICES)
def test_results_are_torch_views_of_the_engines_memory(device, cache_dir):
    e = engine_on(device, cache_dir)
    coords, cond, noise = inputs(device)
    latent = e.sample(coords, cond, noise=noise, sampler=QUICK)
    assert isinstance(latent, torch.Tensor) and latent.device.type == device
    assert latent.dtype == torch.float32 and latent.shape == (115, 32)
    # A DLPack result seen twice is one buffer.
    raw = e._e.forward(noise, torch.full((2,), 1000.0, device=device), coords, cond, 2)
    assert torch.from_dlpack(raw).data_ptr() == torch.from_dlpack(raw).data_ptr()
    # The caller's buffer, poisoned, is written in place.
    out = torch.full_like(noise, float("nan"))
    ptr = out.data_ptr()
    got = e.sample(coords, cond, noise=noise, sampler=QUICK, out=out)
    assert got is out and out.data_ptr() == ptr
    assert torch.equal(out, latent)
    # bf16 condition and a view with a storage offset are taken as they are.
    big = torch.zeros(noise.shape[0] + 3, 32, device=device)
    big[3:] = noise
    assert torch.equal(e.forward(big[3:], 1000.0, cond, coords=coords),
                       e.forward(noise, 1000.0, cond, coords=coords))
    assert e.forward(noise, 500.0, cond.bfloat16(), coords=coords).shape == (115, 32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_callers_stream_and_the_default_stream_give_the_same_bits(cache_dir):
    e = engine_on("cuda", cache_dir)
    coords, cond, noise = inputs("cuda", (300, 90), 2)
    default = e.sample(coords, cond, noise=noise, sampler=QUICK)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        n2 = noise * 1.0          # queued on s: the engine must see it done
        on_s = e.sample(coords, cond, noise=n2, sampler=QUICK)
        same = torch.equal(on_s, default)
    s.synchronize()
    assert same
    assert torch.equal(e.sample(coords, cond, noise=noise, sampler=QUICK, stream=s), default)


@pytest.mark.parametrize("device", DEVICES)
def test_a_torch_state_dict_in_f16_bf16_or_f32(device, tiny_config, tiny_state_dict, cache_dir):
    ref = engine_on(device, cache_dir)
    coords, cond, noise = inputs(device, (33,), 3)
    want = ref.sample(coords, cond, noise=noise, sampler=QUICK)
    for dtype in (torch.float32, torch.bfloat16):
        sd = {k: torch.from_numpy(v).to(device=device, dtype=dtype) for k, v in tiny_state_dict.items()}
        e = sparse3d.Engine.from_state_dict(tiny_config, sd, device=device, cache_dir=cache_dir)
        assert e.model["content_hash"] == ref.model["content_hash"]
        assert torch.equal(e.sample(coords, cond, noise=noise, sampler=QUICK), want)
    # f16 is not bf16: other weights (rounded differently), but accepted and converted.
    sd = {k: torch.from_numpy(v).to(device=device, dtype=torch.float16) for k, v in tiny_state_dict.items()}
    e = sparse3d.Engine.from_state_dict(tiny_config, sd, device=device, cache_dir=cache_dir)
    assert e.sample(coords, cond, noise=noise, sampler=QUICK).isfinite().all()


class Original(torch.nn.Module):
    """A SLatFlowModel stand-in with real parameters (the tiny checkpoint's)."""

    def __init__(self, config, state_dict):
        super().__init__()
        for a in t2._ARG_ATTRIBUTES:
            setattr(self, a, config["args"][a])
        self.rope_freq = tuple(config["args"]["rope_freq"])
        self.dtype = torch.bfloat16
        self.weights = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(v)) for k, v in state_dict.items()})
        self.calls = 0

    def state_dict(self, *args, **kwargs):
        return {k.replace("__", "."): v for k, v in self.weights.items()}

    def forward(self, x, t, cond, **kwargs):
        self.calls += 1
        return x.replace(torch.zeros_like(x.feats))


@pytest.mark.parametrize("device", DEVICES)
def test_the_drop_in_follows_the_pipelines_devices(device, tiny_config, tiny_state_dict, cache_dir):
    class Pipeline:
        pass
    p = Pipeline()
    p.models = {"tex_slat_flow_model_512": Original(tiny_config, tiny_state_dict)}
    acc = t2.accelerate(p, device=device, cache_dir=cache_dir)
    model = p.models["tex_slat_flow_model_512"]
    assert isinstance(model, torch.nn.Module)
    coords, cond, noise = inputs(device, (40, 21), 4)
    x = SparseTensor(noise, coords)
    t = torch.full((2,), 800.0, device=device)
    v = model(x, t, cond)
    assert model.original.calls == 0 and v.feats.device.type == device
    assert model.device.type == device
    want = engine_on(device, cache_dir).forward(noise, t, cond, coords=coords)
    assert torch.equal(v.feats, want)
    # f16 features and condition, as a half-precision pipeline passes them: converted
    # exactly, result in the input's dtype.
    vh = model(SparseTensor(noise.half(), coords), t, cond.half())
    assert vh.feats.dtype == torch.float16
    # low_vram: .cpu() drops the engine (its device memory), the next call builds it again.
    model.cpu()
    if device == "cuda":
        assert model._engine is None
    v2 = model(x, t, cond)
    assert torch.equal(v2.feats, v.feats)
    model.to(device)
    assert acc.fallbacks() == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_fallback_brings_the_original_to_the_inputs_and_it_follows_the_pipeline(
        tiny_config, tiny_state_dict, cache_dir):
    class Pipeline:
        pass
    p = Pipeline()
    original = Original(tiny_config, tiny_state_dict)     # on the CPU, as low_vram keeps it
    p.models = {"shape_slat_flow_model_512": original}
    acc = t2.accelerate(p, cache_dir=cache_dir, release_on_cpu=False)
    model = p.models["shape_slat_flow_model_512"]
    model.to("cuda")
    assert next(original.parameters()).device.type == "cpu"   # not copied beside the engine
    coords, cond, noise = inputs("cuda", (30,), 6)
    x = SparseTensor(noise, coords)
    t = torch.full((1,), 900.0, device="cuda")
    model(x, t, cond)
    engine = model._engine
    model(x, t, cond, unknown_option=True)                     # a fallback
    assert original.calls == 1 and next(original.parameters()).device.type == "cuda"
    model.cpu()                                                 # the pipeline's low_vram move
    assert next(original.parameters()).device.type == "cpu"
    assert model._engine is engine                              # release_on_cpu=False keeps it
    assert [f["reason"] for f in acc.fallbacks()] == [
        "keyword arguments the engine does not take: unknown_option"]
