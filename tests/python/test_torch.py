"""The package with PyTorch tensors: zero copy both ways, the caller's stream, a module's
state dict, the drop-in's .cpu()/.to() and dtype handling. CPU tensors everywhere torch is
installed; CUDA tensors where a GPU is (the H200 runs these from the installed wheel)."""
import re

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (CI: its wheel brings gigabytes of CUDA "
                    "libraries); the NumPy tests cover the API, the GPU machine runs these")

import sparse3d_engine as s3d  # noqa: E402
import sparse3d_engine.trellis2 as t2  # noqa: E402
from conftest import TINY, SparseTensor, make_request  # noqa: E402

QUICK = s3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def engine_on(device, cache_dir):
    return s3d.Engine(TINY, device=device, cache_dir=cache_dir)


def inputs(device, counts=(70, 45), seed=1):
    coords, cond = make_request(list(counts), seed)
    coords, cond = torch.from_numpy(coords).to(device), torch.from_numpy(cond).to(device)
    noise = torch.from_numpy(s3d.draw_noise(seed, coords.shape[0], 32)).to(device)
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
        e = s3d.Engine.from_state_dict(tiny_config, sd, device=device, cache_dir=cache_dir)
        assert e.model["content_hash"] == ref.model["content_hash"]
        assert torch.equal(e.sample(coords, cond, noise=noise, sampler=QUICK), want)
    # f16 is not bf16: other weights (rounded differently), but accepted and converted.
    sd = {k: torch.from_numpy(v).to(device=device, dtype=torch.float16) for k, v in tiny_state_dict.items()}
    e = s3d.Engine.from_state_dict(tiny_config, sd, device=device, cache_dir=cache_dir)
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
    # low_vram: .cpu() offloads the engine's weights to host memory (on a GPU: the CPU
    # backend's have no device memory to free), .to() and the next call bring them back: the
    # same engine, the same bits.
    engine = model._engine
    model.cpu()
    assert model._engine is engine
    assert engine.resident == (device == "cpu")
    if device == "cuda":
        r = engine.residency()
        assert r["offloads"] == 1 and r["bytes_offloaded"] == r["weight_bytes"]
        assert r["device_bytes_released"] >= r["weight_bytes"]
    model.to(device)
    v2 = model(x, t, cond)
    assert torch.equal(v2.feats, v.feats)
    assert model._engine is engine and engine.resident
    assert acc.fallbacks() == []


# The blocks' Linear layers run in bf16, everything else in f32: TRELLIS.2's modules hold
# their parameters in these dtypes, so the engine can use them as they are.
_BF16 = re.compile(r"blocks\.\d+\.(self_attn\.to_qkv|self_attn\.to_out|cross_attn\.to_q|"
                   r"cross_attn\.to_kv|cross_attn\.to_out|mlp\.mlp\.\d|adaLN_modulation\.1)\.")


def run_time_module(config, state_dict, device):
    m = Original(config, state_dict)
    for k, prm in m.weights.items():
        if _BF16.match(k.replace("__", ".")):
            prm.data = prm.data.bfloat16()
    return m.to(device)


def _snapshot(module):
    return {k: (v.data_ptr(), v.detach().clone()) for k, v in module.state_dict().items()}


def _same(module, snapshot):
    now = module.state_dict()
    return set(now) == set(snapshot) and all(
        now[k].data_ptr() == ptr and torch.equal(now[k], value)
        for k, (ptr, value) in snapshot.items())


@pytest.mark.parametrize("device", DEVICES)
def test_the_drop_in_uses_the_modules_own_parameters_and_restore_gives_them_back(
        device, tiny_config, tiny_state_dict, cache_dir):
    class Pipeline:
        pass
    p = Pipeline()
    original = run_time_module(tiny_config, tiny_state_dict, device)
    p.models = {"shape_slat_flow_model_512": original}
    before = _snapshot(original)
    acc = t2.accelerate(p, cache_dir=cache_dir)
    model = p.models["shape_slat_flow_model_512"]
    coords, cond, noise = inputs(device, (40, 21), 4)
    t = torch.full((2,), 800.0, device=device)
    v = model(SparseTensor(noise, coords), t, cond)
    # One copy of the weights: the engine's are the module's own tensors.
    assert model.weights_source() == "borrowed in place"
    r = model._engine.residency()
    assert r["host_copy_bytes"] == 0
    assert torch.equal(v.feats, engine_on(device, cache_dir).forward(noise, t, cond, coords=coords))
    assert "borrowed in place" in acc.report()
    acc.restore()
    assert p.models["shape_slat_flow_model_512"] is original
    assert _same(original, before)
    # share_weights=False: a copy of the engine's own, as before.
    acc = t2.accelerate(p, cache_dir=cache_dir, share_weights=False)
    model = p.models["shape_slat_flow_model_512"]
    assert torch.equal(model(SparseTensor(noise, coords), t, cond).feats, v.feats)
    assert model.weights_source() == "own copy"
    acc.restore()
    assert _same(original, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_low_vram_uploads_from_the_modules_host_parameters_and_copies_nothing_back(
        tiny_config, tiny_state_dict, cache_dir):
    class Pipeline:
        pass
    p = Pipeline()
    original = run_time_module(tiny_config, tiny_state_dict, "cpu")   # low_vram keeps it here
    p.models = {"shape_slat_flow_model_512": original}
    p.low_vram = True
    before = _snapshot(original)
    acc = t2.accelerate(p, cache_dir=cache_dir)
    model = p.models["shape_slat_flow_model_512"]
    coords, cond, noise = inputs("cuda", (40, 21), 4)
    t = torch.full((2,), 800.0, device="cuda")
    model.to("cuda")
    v = model(SparseTensor(noise, coords), t, cond)
    assert model.weights_source() == "borrowed host home"
    model.cpu()
    r = model._engine.residency()
    assert not r["resident"] and r["bytes_offloaded"] == 0 and r["host_copy_bytes"] == 0
    assert r["device_bytes_released"] >= r["weight_bytes"]
    model.to("cuda")
    assert torch.equal(model(SparseTensor(noise, coords), t, cond).feats, v.feats)
    assert torch.equal(v.feats, engine_on("cuda", cache_dir).forward(noise, t, cond, coords=coords))
    acc.restore()
    assert _same(original, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_engines_of_a_pipeline_share_one_workspace(tiny_config, tiny_state_dict, cache_dir):
    class Pipeline:
        pass
    p = Pipeline()
    p.models = {name: run_time_module(tiny_config, tiny_state_dict, "cuda")
                for name in ("shape_slat_flow_model_512", "tex_slat_flow_model_512")}
    acc = t2.accelerate(p, cache_dir=cache_dir)
    coords, cond, noise = inputs("cuda", (40, 21), 4)
    t = torch.full((2,), 800.0, device="cuda")
    outs = [p.models[n](SparseTensor(noise, coords), t, cond).feats for n in p.models]
    assert list(acc.workspaces) == [0]
    ws = acc.workspaces[0]
    for n in p.models:
        assert p.models[n]._engine.counters()["device_bytes_reserved"] == ws.stats()["bytes_reserved"]
    ws.release_cache()
    assert ws.stats()["bytes_reserved"] == ws.stats()["bytes_in_use"]
    assert torch.equal(outs[0], outs[1])   # the same weights: the same bits
    acc.restore()


@pytest.mark.parametrize("device", DEVICES)
def test_warm_up_on_the_pipelines_device_in_low_vram_mode(device, tiny_config, tiny_state_dict,
                                                         cache_dir, monkeypatch):
    # The released warm-up sizes take minutes on the CPU backend: scaled down.
    monkeypatch.setattr(t2, "WARM_UP_TOKENS", 64)
    monkeypatch.setattr(t2, "COND_TOKENS", {"shape_slat_flow_model_512": 21})

    class Pipeline:
        pass
    p = Pipeline()
    p.models = {"shape_slat_flow_model_512": Original(tiny_config, tiny_state_dict)}
    p.device = torch.device(device)   # TRELLIS.2's Pipeline.device after .cuda()
    p.low_vram = True
    acc = t2.accelerate(p, cache_dir=cache_dir, warm_up=True)
    model = p.models["shape_slat_flow_model_512"]
    engine = model._engine
    assert engine is not None and model.device.type == device
    assert engine.counters()["requests"] == 1
    # low_vram keeps a flow model off the GPU between stages: offloaded until its .to().
    assert engine.resident == (device == "cpu")
    model.to(device)
    coords, cond, noise = inputs(device, (40, 21), 4)
    t = torch.full((2,), 800.0, device=device)
    v = model(SparseTensor(noise, coords), t, cond)
    assert model._engine is engine and engine.resident
    assert torch.equal(v.feats, engine_on(device, cache_dir).forward(noise, t, cond, coords=coords))
    assert t2._device_tuple(torch.device("cuda", 1)) == ("cuda", 1)
    assert t2._device_tuple(torch.device("cpu")) == ("cpu", 0)
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
    assert model._engine is engine and engine.resident          # release_on_cpu=False keeps it
    assert [f["reason"] for f in acc.fallbacks()] == [
        "keyword arguments the engine does not take: unknown_option"]


class SparseStructureFlowModel(torch.nn.Module):
    """A dense-model stand-in (TRELLIS.2's class name) with real parameters (the tiny dense
    checkpoint's) and the original's complex64 rope_phases buffer in its state dict."""

    def __init__(self, config, state_dict):
        super().__init__()
        for a in t2._ARG_ATTRIBUTES:
            setattr(self, a, config["args"][a])
        self.dtype = torch.bfloat16
        self.weights = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(v)) for k, v in state_dict.items()})
        D = self.model_channels // self.num_heads
        self.register_buffer("rope_phases", torch.ones(self.resolution ** 3, D // 2,
                                                       dtype=torch.complex64))
        self.calls = 0

    def state_dict(self, *args, **kwargs):
        sd = {k.replace("__", "."): v for k, v in self.weights.items()}
        sd["rope_phases"] = self.rope_phases
        return sd

    def forward(self, x, t, cond):
        self.calls += 1
        return torch.zeros_like(x)


class FlowEulerGuidanceIntervalSampler:
    """TRELLIS.2's sampler signature (the drop-in runs the whole loop in the engine; this
    one's own loop never runs here)."""
    sigma_min = 1e-5

    def __init__(self):
        self.loops = 0

    def sample(self, model, noise, cond, neg_cond, steps=50, rescale_t=1.0,
               guidance_strength=3.0, guidance_interval=(0.0, 1.0), verbose=True,
               tqdm_desc="Sampling", **kwargs):
        self.loops += 1
        raise AssertionError("the original sampler ran")


@pytest.mark.parametrize("device", DEVICES)
def test_the_dense_drop_in_with_torch_volumes(device, dense_config, dense_state_dict, cache_dir):
    from conftest import DENSE_C, DENSE_R

    class Pipeline:
        pass
    p = Pipeline()
    original = SparseStructureFlowModel(dense_config, dense_state_dict)
    assert t2.family_of_module(original) == "SparseStructureFlowModel"
    p.models = {"sparse_structure_flow_model": original}
    p.sparse_structure_sampler = FlowEulerGuidanceIntervalSampler()
    acc = t2.accelerate(p, device=device, cache_dir=cache_dir)
    model = p.models["sparse_structure_flow_model"]
    assert isinstance(model, torch.nn.Module) and model.family == "SparseStructureFlowModel"
    g = torch.Generator().manual_seed(7)
    noise = torch.randn(2, DENSE_C, DENSE_R, DENSE_R, DENSE_R, generator=g).to(device)
    cond = torch.randn(2, 9, 64, generator=g).to(device)
    t = torch.tensor([1000.0, 640.0], device=device)
    v = model(noise, t, cond)
    assert isinstance(v, torch.Tensor) and v.shape == noise.shape and v.dtype == torch.float32
    assert v.device.type == device and original.calls == 0
    # The engine built from the module's state dict (its rope_phases buffer left out) is the
    # one a state dict without it gives.
    e = s3d.Engine.from_state_dict(dense_config, dense_state_dict, device=device,
                                        cache_dir=cache_dir)
    assert torch.equal(v, e.forward(noise, t, cond))
    # f16 volumes in, f16 out (as the original returns x's dtype); bf16 taken as it is.
    assert model(noise.half(), t, cond.half()).dtype == torch.float16
    assert model(noise.bfloat16(), t, cond).dtype == torch.bfloat16
    # One t for every volume, as a 0-d tensor.
    assert torch.equal(model(noise, torch.tensor(1000.0, device=device), cond)[0], v[0])
    # The whole loop in the engine.
    params = dict(steps=3, rescale_t=5.0, guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                  guidance_rescale=0.7)
    z = p.sparse_structure_sampler.sample(model, noise, cond, torch.zeros_like(cond),
                                          verbose=False, **params).samples
    # Against the drop-in's own engine: on a GPU its options differ from a plain engine's
    # (no CUDA graphs, flags held to the PyTorch reference), and so may its bits.
    want = model._engine.sample(cond=cond, noise=noise,
                                sampler=s3d.SamplerSettings(steps=3, rescale_t=5.0,
                                                            guidance_rescale=0.7))
    assert isinstance(z, torch.Tensor) and z.device.type == device and torch.equal(z, want)
    assert p.sparse_structure_sampler.original.loops == 0
    # .cpu() (TRELLIS.2's low_vram) offloads the engine's weights to host memory and keeps
    # the engine: the next call reloads them.
    model.cpu()
    if device == "cuda":
        assert model._engine is not None and not model._engine.resident
        assert model._engine.residency()["offloads"] == 1
    assert acc.fallbacks() == [] and original.calls == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_workspace_on_torchs_memory_takes_and_gives_back_there(cache_dir):
    # accelerate()'s default (workspace_memory="torch"): the shared workspace's blocks come
    # from PyTorch's caching allocator, and release_cache() leaves them cached there (PyTorch's
    # reserved bytes stay, its allocated bytes fall), with the bits of a driver workspace.
    coords, cond, noise = inputs("cuda", (301, 97), 5)
    path = s3d.default_path() + "-cuda_graphs"   # graphs' pools take the driver's memory
    driver = s3d.Workspace(0)
    assert driver.memory == "driver"
    want = s3d.Engine(TINY, device="cuda", path=path, cache_dir=cache_dir,
                      workspace=driver).sample(coords, cond, noise=noise, sampler=QUICK)
    torch.cuda.synchronize()
    ws = s3d.Workspace(0, memory="torch")
    assert ws.memory == "torch" and "memory='torch'" in repr(ws)
    before = torch.cuda.memory_allocated()
    e = s3d.Engine(TINY, device="cuda", path=path, cache_dir=cache_dir, workspace=ws)
    # Every block the workspace holds is PyTorch's (its sizes are PyTorch's rounding already).
    assert torch.cuda.memory_allocated() - before == ws.stats()["bytes_reserved"] > 0
    got = e.sample(coords, cond, noise=noise, sampler=QUICK)
    assert torch.equal(got, want)
    cached = ws.stats()["bytes_reserved"] - ws.stats()["bytes_in_use"]
    assert cached > 0
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    assert ws.release_cache() == cached
    assert torch.cuda.memory_allocated() == allocated - cached   # back to PyTorch's cache
    assert torch.cuda.memory_reserved() == reserved              # not to the driver
    assert torch.equal(e.sample(coords, cond, noise=noise, sampler=QUICK), want)
    del e, got
    with pytest.raises(s3d.Error, match="memory must be 'driver' or 'torch', got 'cuda'"):
        s3d.Workspace(0, memory="cuda")
