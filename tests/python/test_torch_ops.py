"""The engine's calls as torch custom ops (sparse3d_engine.torch_ops): a module calling the
engine compiles with torch.compile(fullgraph=True) (no graph break) and gives the bits of
the uncompiled call; torch.library.opcheck on both ops; the drop-in calls through them.
Skipped without torch (CI); CPU tensors, and CUDA ones where a GPU is."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (CI: its wheel brings gigabytes of CUDA "
                    "libraries); the GPU machine runs these")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch 2.4 or later", allow_module_level=True)

import sparse3d_engine as s3d  # noqa: E402
from sparse3d_engine import torch_ops  # noqa: E402
from conftest import (DENSE_C, DENSE_R, TINY, SparseTensor, dense_request,  # noqa: E402
                      make_request)

QUICK = s3d.SamplerSettings(steps=2, guidance_interval=(0.0, 1.0))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def engine_on(device, cache_dir):
    return s3d.Engine(TINY, device=device, cache_dir=cache_dir)


def inputs(device, counts=(40, 25), seed=3):
    coords, cond = make_request(list(counts), seed)
    coords, cond = torch.from_numpy(coords).to(device), torch.from_numpy(cond).to(device)
    x = torch.from_numpy(s3d.draw_noise(seed, coords.shape[0], 32)).to(device)
    t = torch.tensor([700.0, 300.0], device=device)
    return coords, cond, x, t


class Denoiser(torch.nn.Module):
    """A module whose forward calls the engine (through the op) between torch ops."""

    def __init__(self, engine):
        super().__init__()
        self.engine = engine
        self.scale = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)

    def forward(self, x, t, cond, coords):
        v = torch_ops.forward(self.engine, x * 1.0, t, cond, coords=coords)
        return v * self.scale + x


class Sampler(torch.nn.Module):
    def __init__(self, engine, sampler):
        super().__init__()
        self.engine_id = engine.id      # an int: what the op takes
        self.sampler = sampler

    def forward(self, coords, cond, noise):
        latent = torch_ops.sample(self.engine_id, coords, cond * 1.0, noise=noise,
                                  sampler=self.sampler, progress=False)
        return latent.sum(dim=1)


def _compile(module, backend):
    return torch.compile(module, fullgraph=True, backend=backend)


@pytest.mark.parametrize("device", DEVICES)
def test_the_forward_op_is_the_engines_forward(device, cache_dir):
    e = engine_on(device, cache_dir)
    coords, cond, x, t = inputs(device)
    want = e.forward(x, t, cond, coords=coords)
    got = torch.ops.sparse3d_engine.forward(e.id, x, t, cond, coords, None, None)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert torch.equal(torch_ops.forward(e, x, t, cond, coords=coords), want)
    # bf16 x, an int64 coords, a scalar t, a path: converted as Engine.forward would.
    got = torch_ops.forward(e, x.bfloat16(), 500.0, cond, coords=coords.long(), path="pure_eager")
    assert torch.equal(got, e.forward(x.bfloat16(), 500.0, cond, coords=coords, path="pure_eager"))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_module_calling_the_engine_compiles_without_graph_breaks(backend, cache_dir):
    e = engine_on("cpu", cache_dir)
    coords, cond, x, t = inputs("cpu")
    m = Denoiser(e)
    want = m(x, t, cond, coords)
    compiled = _compile(m, backend)
    assert torch.equal(compiled(x, t, cond, coords), want)
    # Another token count: the fake implementation gives the new shape (no error, the same bits).
    coords2, cond2, x2, t2 = inputs("cpu", (17, 30), 5)
    assert torch.equal(compiled(x2, t2, cond2, coords2), m(x2, t2, cond2, coords2))


def test_the_default_backend_compiles_it_too(cache_dir):
    """Inductor around the op (it needs a C++ compiler on the CPU; skipped where it fails to
    set up, not where it gives other values)."""
    e = engine_on("cpu", cache_dir)
    coords, cond, x, t = inputs("cpu")
    m = Denoiser(e)
    want = m(x, t, cond, coords)
    try:
        got = _compile(m, "inductor")(x, t, cond, coords)
    except Exception as exc:  # noqa: BLE001 - environment: no compiler, no triton
        if "graph break" in str(exc).lower() or "Unsupported" in type(exc).__name__:
            raise
        pytest.skip(f"inductor is not usable here: {type(exc).__name__}: {exc}")
    # Inductor may fuse v * scale + x into one rounding: the engine's part is the same bits.
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_the_sample_op_compiles_and_is_the_engines_sample(device, cache_dir):
    e = engine_on(device, cache_dir)
    coords, cond, noise, _ = inputs(device)
    want = e.sample(coords, cond, noise=noise, sampler=QUICK, progress=False)
    assert torch.equal(torch_ops.sample(e, coords, cond, noise=noise, sampler=QUICK), want)
    m = Sampler(e, QUICK)
    compiled = _compile(m, "eager")
    assert torch.equal(compiled(coords, cond, noise), want.sum(dim=1))
    # A seed instead of noise, and the family's default settings (an Engine, not an id).
    by_seed = torch_ops.sample(e, coords, cond, seed=4, sampler=QUICK)
    assert torch.equal(by_seed, e.sample(coords, cond, seed=4, sampler=QUICK, progress=False))
    with pytest.raises(s3d.Error, match="sampler="):
        torch_ops.sample(e.id, coords, cond, noise=noise)


def test_the_dense_model_in_volume_mode(dense_engine):
    noise, cond = dense_request(2, 7)
    noise, cond = torch.from_numpy(noise), torch.from_numpy(cond)
    t = torch.tensor([800.0, 200.0])
    want_v = dense_engine.forward(noise, t, cond)

    class Dense(torch.nn.Module):
        def forward(self, x, t, cond):
            return torch_ops.forward(dense_engine, x, t, cond)

    got = _compile(Dense(), "eager")(noise, t, cond)
    assert got.shape == (2, DENSE_C, DENSE_R, DENSE_R, DENSE_R) and torch.equal(got, want_v)
    # Volume mode sampling from a seed: the fake gives [B, C, R, R, R] from cond alone.
    sampler = s3d.SamplerSettings.released_sparse_structure()
    sampler.steps = 2
    want = dense_engine.sample(cond=cond, seed=9, sampler=sampler, progress=False)

    class DenseSampler(torch.nn.Module):
        def forward(self, cond):
            return torch_ops.sample(dense_engine, cond=cond, seed=9, sampler=sampler)

    got = _compile(DenseSampler(), "eager")(cond)
    assert got.shape == (2, DENSE_C, DENSE_R, DENSE_R, DENSE_R) and torch.equal(got, want)


def test_opcheck(cache_dir, dense_engine):
    """torch.library.opcheck: the schema, the fake implementations against the real calls
    (shapes, dtypes, strides), and the ops under AOT dispatch with dynamic shapes."""
    e = engine_on("cpu", cache_dir)
    coords, cond, x, t = inputs("cpu")
    torch.library.opcheck(torch.ops.sparse3d_engine.forward.default,
                          (e.id, x, t, cond, coords, None, None))
    s = QUICK
    lo, hi = s.guidance_interval
    args = (e.id, coords, cond, x, None, None, s.steps, s.rescale_t, s.guidance, lo, hi,
            s.guidance_rescale, s.sigma_min, None, False, "Sampling")
    torch.library.opcheck(torch.ops.sparse3d_engine.sample.default, args)
    noise, dcond = (torch.from_numpy(a) for a in dense_request(1, 2))
    torch.library.opcheck(torch.ops.sparse3d_engine.forward.default,
                          (dense_engine.id, noise, torch.tensor([500.0]), dcond, None, None, None))
    torch.library.opcheck(torch.ops.sparse3d_engine.sample.default,
                          (dense_engine.id, None, dcond, None, 3) + args[5:])


def test_an_engine_id_that_is_gone(cache_dir):
    e = engine_on("cpu", cache_dir)
    gone = e.id
    assert s3d.engine_by_id(gone) is e
    del e
    import gc
    gc.collect()
    coords, cond, x, t = inputs("cpu")
    with pytest.raises(s3d.Error, match=f"no live sparse3d_engine.Engine has id {gone}"):
        torch.ops.sparse3d_engine.forward(gone, x, t, cond, coords, None, None)


def test_the_drop_in_calls_the_engine_through_the_ops(monkeypatch, tiny_config, tiny_state_dict,
                                                      cache_dir):
    """A model call goes through the forward op; a sampler's whole loop through the sample op,
    which enters the Engine once (Engine._sample: the memory check and the cache release
    inside it), and nothing of the Engine is called beside the op (docs/PYTHON.md, "The
    drop-in's sample call")."""
    import sparse3d_engine.trellis2 as t2
    from test_trellis2 import OriginalModule, Pipeline
    calls, entries = [], []
    for name in ("forward", "sample"):
        real = getattr(torch.ops.sparse3d_engine, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)
        monkeypatch.setattr(torch.ops.sparse3d_engine, name, spy)
    for name in ("sample", "_sample", "forward", "fits", "reload", "release_cache"):
        method = getattr(s3d.Engine, name)

        def entered(self, *args, _method=method, _name=name, **kwargs):
            entries.append((_name, tuple(calls)))
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(s3d.Engine, name, entered)
    sd = {k: torch.from_numpy(v) for k, v in tiny_state_dict.items()}
    pipeline = Pipeline(OriginalModule(tiny_config, sd))
    acc = t2.accelerate(pipeline, cache_dir=cache_dir)
    model = pipeline.models["shape_slat_flow_model_512"]
    coords, cond, x, t = inputs("cpu")
    sparse = SparseTensor(x, coords)
    v = model(sparse, t, cond)
    assert entries == [("forward", ("forward",))]
    assert torch.equal(v.feats, s3d.Engine(TINY, device="cpu", cache_dir=cache_dir)
                       .forward(x, t, cond, coords=coords))
    entries.clear()
    out = pipeline.shape_slat_sampler.sample(model, sparse, cond, torch.zeros_like(cond),
                                             steps=2, rescale_t=3.0, guidance_strength=7.5,
                                             guidance_interval=(0.0, 1.0), verbose=False)
    assert isinstance(out.samples.feats, torch.Tensor)
    assert calls == ["forward", "sample"] and acc.fallbacks() == []
    assert entries == [("_sample", ("forward", "sample"))]
    assert "torch" in sys.modules


def test_the_drop_in_models_forward_compiles_without_graph_breaks(tiny_config, tiny_state_dict,
                                                                  dense_config, dense_state_dict,
                                                                  cache_dir):
    """EngineFlowModel's call, as a TRELLIS.2 sampler makes it, inside a compiled function:
    a SLatFlowModel on a SparseTensor and the SparseStructureFlowModel on a volume."""
    import sparse3d_engine.trellis2 as t2
    from test_trellis2 import OriginalModule, SparseStructureFlowModel
    torch_sd = lambda sd: {k: torch.from_numpy(v) for k, v in sd.items()}  # noqa: E731
    pipeline = type("P", (), {})()
    pipeline.models = {
        "shape_slat_flow_model_512": OriginalModule(tiny_config, torch_sd(tiny_state_dict)),
        "sparse_structure_flow_model": SparseStructureFlowModel(dense_config,
                                                                torch_sd(dense_state_dict))}
    acc = t2.accelerate(pipeline, samplers=(), cache_dir=cache_dir)
    slat = pipeline.models["shape_slat_flow_model_512"]
    dense = pipeline.models["sparse_structure_flow_model"]
    coords, cond, x, t = inputs("cpu")

    def step(x, t, cond, coords):
        return x - 0.1 * slat(SparseTensor(x, coords), t, cond).feats

    want = step(x, t, cond, coords)
    assert torch.equal(_compile(step, "eager")(x, t, cond, coords), want)
    noise, dcond = (torch.from_numpy(a) for a in dense_request(2, 3))

    def dense_step(x, t, cond):
        return x - 0.1 * dense(x, t, cond)

    want = dense_step(noise, t, dcond)
    assert torch.equal(_compile(dense_step, "eager")(noise, t, dcond), want)
    assert acc.fallbacks() == []


# ---- the sampler's settings and the numbers: taken as they are, compiled or not ----------------

@pytest.mark.parametrize("settings, message", [
    (dict(steps=2.7), "sampler: steps must be an integer, got 2.7 (float)"),
    (dict(steps="2"), "sampler: steps must be an integer, got '2' (str)"),
    (dict(steps=True), "sampler: steps must be an integer, got True (bool)"),
    (dict(steps=2, rescale_t="3"), "sampler: rescale_t must be a real number, got '3' (str)"),
    (dict(steps=2, guidance=float("nan")), "sampler: guidance must be finite, got nan"),
])
def test_the_sample_op_takes_settings_as_they_are(cache_dir, settings, message):
    e = engine_on("cpu", cache_dir)
    coords, cond, noise, _ = inputs("cpu")
    sampler = dict(guidance_interval=(0.0, 1.0), **settings)
    with pytest.raises(s3d.Error) as exc:
        torch_ops.sample(e, coords, cond, noise=noise, sampler=sampler)
    assert str(exc.value) == message
    # The same check where torch.compile traces the call (Python scalars, at trace time).
    for spec in (s3d.SamplerSettings(**sampler), sampler):
        torch._dynamo.reset()
        with pytest.raises(Exception) as exc:
            _compile(Sampler(e, spec), "eager")(coords, cond, noise)
        assert message in str(exc.value)
    assert e.counters()["requests"] == 0   # nothing ran


def test_the_ops_take_numbers_as_they_are(cache_dir):
    e = engine_on("cpu", cache_dir)
    coords, cond, x, _ = inputs("cpu")
    with pytest.raises(s3d.Error, match=r"^sample: seed must be an integer, got 1\.5 \(float\)$"):
        torch_ops.sample(e, coords, cond, seed=1.5, sampler=QUICK)
    with pytest.raises(s3d.Error, match=r"^sample: seed must be an integer in \[0, "
                                        r"9223372036854775807\], got 9223372036854775808$"):
        torch_ops.sample(e, coords, cond, seed=2**63, sampler=QUICK)
    with pytest.raises(s3d.Error, match=r"^forward: t must be a real number, got '500' \(str\)$"):
        torch_ops.forward(e, x, "500", cond, coords=coords)
    with pytest.raises(s3d.Error, match=r"^engine \(an Engine or its id\) must be an integer, "
                                        r"got 1\.0 \(float\)$"):
        torch_ops.forward(1.0, x, 500.0, cond, coords=coords)
    with pytest.raises(s3d.Error, match=r"^sample: path must be a str, got 3 \(int\)$"):
        torch_ops.sample(e, coords, cond, seed=1, sampler=QUICK, path=3)
    # A NumPy integer is an integer: the same latent as the int's.
    got = torch_ops.sample(e, coords, cond, seed=np.int64(4), sampler=dict(
        steps=np.int32(2), guidance_interval=(0.0, 1.0)))
    assert torch.equal(got, torch_ops.sample(e, coords, cond, seed=4, sampler=QUICK))
    assert torch.equal(torch_ops.forward(e, x, np.float32(500.0), cond, coords=coords),
                       torch_ops.forward(e, x, 500.0, cond, coords=coords))


def test_a_dict_sampler_compiles_too(cache_dir):
    e = engine_on("cpu", cache_dir)
    coords, cond, noise, _ = inputs("cpu")
    want = e.sample(coords, cond, noise=noise, sampler=QUICK, progress=False)
    spec = dict(steps=2, guidance_interval=(0.0, 1.0))
    assert torch.equal(_compile(Sampler(e, spec), "eager")(coords, cond, noise), want.sum(dim=1))


_COMPILED_TO_THE_END = """
import os
import subprocess
import sys
import torch
import sparse3d_engine as s3d
from sparse3d_engine import torch_ops

engine = s3d.Engine(sys.argv[1], device="cpu", cache_dir=sys.argv[2])


class Denoiser(torch.nn.Module):
    def __init__(self, engine):
        super().__init__()
        self.engine = engine

    def forward(self, x, t, cond, coords):
        return torch_ops.forward(self.engine, x * 1.0, t, cond, coords=coords) + x


coords = torch.tensor([[0, 1, 2, 3], [0, 4, 5, 6], [0, 7, 1, 2]], dtype=torch.int32)
cond = torch.ones(1, 9, 64)
x = torch.full((3, 32), 0.25)
compiled = torch.compile(Denoiser(engine), fullgraph=True, backend="eager")
print("shape", tuple(compiled(x, torch.tensor([500.0]), cond, coords).shape))
"""


def test_an_engine_in_a_compiled_module_exits_cleanly(tmp_path, cache_dir):
    """torch.compile keeps what a compiled frame read (under torch 2.6 to the very end, never
    freed): the engine is let go at exit, with no leak report and exit code 0."""
    program = tmp_path / "compiled.py"
    program.write_text(_COMPILED_TO_THE_END)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(s3d.__file__)),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(program), TINY, cache_dir], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "shape (3, 32)" in done.stdout
    assert "leaked" not in done.stderr and "nanobind" not in done.stderr, done.stderr
