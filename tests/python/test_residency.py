"""Residency and start-up on the CPU backend: Engine.offload()/reload() (the same moves as on
a GPU, between host buffers) keep every bit; engines build without the GIL; an engine alive
at the interpreter's end, or in a reference cycle through its log callable, leaves nothing
for nanobind to report; the drop-in builds each engine once, warms them up ahead
(accelerate(..., warm_up=True)) and offloads and reloads them for the pipeline's moves."""
import gc
import json
import os
import re
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import sparse3d_engine as s3d
import sparse3d_engine.trellis2 as t2
from conftest import TINY, SparseTensor, dense_request, make_request
from test_trellis2 import FullPipeline, OriginalModule, _texture
from test_trellis2 import SparseStructureFlowModel as DenseOriginal

QUICK = s3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0))


# The Linear layers inside the blocks run in bf16, everything else in f32 (the released
# module's dtypes, so what its .cpu() / .cuda() move too).
_BF16 = re.compile(r"blocks\.\d+\.(self_attn\.to_qkv|self_attn\.to_out|cross_attn\.to_q|"
                   r"cross_attn\.to_kv|cross_attn\.to_out|mlp\.mlp\.\d|adaLN_modulation\.1)\.")


def _run_time_bytes(state_dict):
    return sum(v.size * (2 if _BF16.match(k) else 4) for k, v in state_dict.items())


def _residency_after(engine, action):
    action()
    return engine.residency()


def test_offload_and_reload_keep_every_bit_and_say_what_moved(engine, tiny_state_dict):
    coords, cond = make_request([41, 30], 5)
    latent = engine.sample(coords, cond, seed=3, sampler=QUICK)
    v = engine.forward(latent, 700.0, cond, coords=coords)
    r = engine.residency()
    assert engine.resident and r["resident"]
    assert r["offloads"] == r["reloads"] == r["host_copy_bytes"] == 0
    weights = r["weight_bytes"]
    assert weights == _run_time_bytes(tiny_state_dict)

    r = _residency_after(engine, engine.offload)
    assert not engine.resident and not r["resident"]
    assert r["offloads"] == 1 and r["bytes_offloaded"] == weights
    # Each tensor at a 256-byte aligned offset of one buffer.
    assert weights <= r["host_copy_bytes"] < weights + 256 * len(tiny_state_dict)
    assert r["host_copy_bytes"] % 256 == 0
    assert r["device_bytes_released"] == 0           # the CPU backend holds no device memory
    engine.offload()                                 # already offloaded: nothing
    assert engine.residency()["offloads"] == 1

    r = _residency_after(engine, engine.reload)
    assert engine.resident
    assert r["reloads"] == 1 and r["bytes_reloaded"] == r["host_copy_bytes"]
    assert r["offload_seconds"] >= 0 and r["reload_seconds"] >= 0
    np.testing.assert_array_equal(engine.sample(coords, cond, seed=3, sampler=QUICK), latent)
    np.testing.assert_array_equal(engine.forward(latent, 700.0, cond, coords=coords), v)

    # Later offloads find the host copy: nothing copied again.
    engine.offload()
    engine.reload()
    r = engine.residency()
    assert r["offloads"] == 2 and r["bytes_offloaded"] == weights
    assert r["bytes_reloaded"] == 2 * r["host_copy_bytes"]


def test_a_request_after_offload_reloads_by_itself(engine, dense_engine):
    coords, cond = make_request([41], 6)
    latent = engine.sample(coords, cond, seed=4, sampler=QUICK)
    engine.offload()
    np.testing.assert_array_equal(engine.sample(coords, cond, seed=4, sampler=QUICK), latent)
    assert engine.resident and engine.residency()["reloads"] == 1
    # The dense model, in volumes.
    noise, cond = dense_request(2, 7)
    z = dense_engine.sample(cond=cond, noise=noise, sampler=QUICK)
    dense_engine.offload()
    np.testing.assert_array_equal(dense_engine.sample(cond=cond, noise=noise, sampler=QUICK), z)


def test_construction_releases_the_gil(tiny_config, tiny_state_dict, cache_dir):
    # The tiny model's blocks 150 times over (37M parameters): its conversion and hash take
    # long enough to be seen from another thread.
    config = json.loads(json.dumps(tiny_config))
    config["args"]["num_blocks"] = 150
    state = {}
    for key, value in tiny_state_dict.items():
        m = re.match(r"blocks\.(\d+)\.(.*)", key)
        if m is None:
            state[key] = value
        elif m.group(1) == "0":
            state.update({f"blocks.{i}.{m.group(2)}": value for i in range(150)})
    built, done = {}, threading.Event()

    def build():
        try:
            built["engine"] = s3d.Engine.from_state_dict(config, state, device="cpu",
                                                              cache_dir=cache_dir)
        finally:
            done.set()

    ticks = 0
    worker = threading.Thread(target=build)
    t0 = time.perf_counter()
    worker.start()
    while not done.is_set():
        ticks += 1
        done.wait(0.001)
    elapsed_ms = (time.perf_counter() - t0) * 1e3
    worker.join()
    assert built["engine"].model["num_blocks"] == 150
    # This thread ran while the construction did (a held GIL would allow it one or two turns
    # in all): about one turn per millisecond (17 in 20 ms on 16 cores, hundreds on 2).
    assert ticks >= 5 and ticks >= 0.25 * elapsed_ms, (ticks, elapsed_ms)


# A program that keeps engines alive to the end: one whose log callable is a lambda of the
# module (whose globals hold the engine: a reference cycle through the C++ engine), one
# whose log is a bound method of the object holding it, a plain one and a result; and one
# held by a reference nothing ever drops (as torch.compile's caches under torch 2.6 hold a
# compiled module's engine: never freed, so the engine used to outlive the interpreter).
_AT_EXIT = """
import ctypes
import sys
import numpy as np
import sparse3d_engine as s3d

TINY = sys.argv[1]
LINES = []
logged = s3d.Engine(TINY, device="cpu", cache_dir=sys.argv[2], log=lambda line: LINES.append(line))


class Service:
    def __init__(self):
        self.engine = s3d.Engine(TINY, device="cpu", cache_dir=sys.argv[2], log=self.on_log)

    def on_log(self, line):
        LINES.append(line)


service = Service()
plain = s3d.Engine(TINY, device="cpu", cache_dir=sys.argv[2])
coords = np.array([[0, 1, 2, 3], [0, 4, 5, 6]], np.int32)
latent = plain.sample(coords, np.ones((1, 9, 64), np.float32), seed=1, sampler={"steps": 2})
plain.offload()
held_forever = [s3d.Engine(TINY, device="cpu", cache_dir=sys.argv[2])]
ctypes.pythonapi.Py_IncRef(ctypes.py_object(held_forever))
print("engines alive:", len(LINES) > 0, latent.shape)
"""


def test_an_engine_alive_at_the_interpreters_end_exits_cleanly(tmp_path):
    program = tmp_path / "keeps_engines.py"
    program.write_text(_AT_EXIT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(s3d.__file__)),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(program), TINY, str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "engines alive: True (2, 32)" in done.stdout
    assert "leaked" not in done.stderr, done.stderr
    assert "nanobind" not in done.stderr, done.stderr


def test_a_cycle_through_the_log_callable_is_collected(cache_dir):
    class Holder:
        def __init__(self):
            self.lines = []
            self.engine = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir,
                                          log=lambda line: self.lines.append(line))

    holder = Holder()
    assert holder.lines
    # The native engine -> its log lambda -> holder -> the Python Engine -> the native engine:
    # only the collector frees it, and only if it sees the native engine's reference.
    gone = weakref.ref(holder.engine)
    del holder
    gc.collect()
    assert gone() is None


# ---- The drop-in -----------------------------------------------------------------------------

@pytest.fixture
def full(tiny_config, tiny_state_dict, dense_config, dense_state_dict):
    tex_config, tex_state = _texture(tiny_config, tiny_state_dict)
    return FullPipeline(DenseOriginal(dense_config, dense_state_dict),
                        OriginalModule(tiny_config, tiny_state_dict),
                        OriginalModule(tex_config, tex_state))


SMALL = {name: 9 for name in t2.FLOW_MODELS}   # the stand-ins' condition length


def test_warm_up_builds_every_engine_ahead(full, cache_dir):
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir)
    assert all(m._engine is None for m in acc.models.values())
    took = acc.warm_up(tokens=40, cond_tokens=SMALL)
    assert sorted(took) == sorted(t2.FLOW_MODELS) and all(s > 0 for s in took.values())
    engines = {name: m._engine for name, m in acc.models.items()}
    assert all(e is not None and e.counters()["requests"] == 1 for e in engines.values())
    report = acc.report()
    assert report.count("warmed up in") == 5
    assert report.count("engine on the CPU, weights on the device") == 5

    # The first request of the warmed size builds nothing: same engine, no qualification.
    model = full.models["shape_slat_flow_model_512"]
    qualified = engines["shape_slat_flow_model_512"].counters()["qualifications_run"]
    coords, cond = make_request([40], 3)
    noise = SparseTensor(s3d.draw_noise(3, 40, 32), coords)
    out = full.shape_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), steps=3,
                                         rescale_t=3.0, guidance_strength=7.5,
                                         guidance_interval=(0.0, 1.0), guidance_rescale=0.5,
                                         verbose=False)
    assert model._engine is engines["shape_slat_flow_model_512"]
    assert model._engine.counters()["qualifications_run"] == qualified
    direct = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir).sample(
        coords, cond, noise=noise.feats, sampler=QUICK)
    np.testing.assert_array_equal(out.samples.feats, direct)
    # A named subset, and a name that is not accelerated.
    assert sorted(acc.warm_up(["sparse_structure_flow_model"], cond_tokens=SMALL)) == \
        ["sparse_structure_flow_model"]
    with pytest.raises(s3d.Error, match="image_cond_model not accelerated"):
        acc.warm_up(["image_cond_model"])
    assert acc.fallbacks() == []


def test_accelerate_warm_up_true_uses_the_stage_defaults(full, cache_dir, monkeypatch):
    # The released sizes (4,096 tokens; 1,029 / 4,101 condition tokens) take minutes on the
    # CPU backend: the defaults, scaled down.
    monkeypatch.setattr(t2, "WARM_UP_TOKENS", 24)
    monkeypatch.setattr(t2, "COND_TOKENS", {name: 5 + i for i, name in enumerate(t2.FLOW_MODELS)})
    seen = {}
    original = s3d.Engine.warm_up

    def record(self, tokens, cond_tokens):
        seen[self.model["checkpoint"]] = (list(tokens), cond_tokens)
        return original(self, tokens, cond_tokens)

    monkeypatch.setattr(s3d.Engine, "warm_up", record)
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir, warm_up=True)
    assert seen == {
        "sparse_structure_flow_model (state dict)": ([8 ** 3], 5),   # one grid, R = 8
        "shape_slat_flow_model_512 (state dict)": ([24], 6),
        "shape_slat_flow_model_1024 (state dict)": ([24], 7),
        "tex_slat_flow_model_512 (state dict)": ([24], 8),
        "tex_slat_flow_model_1024 (state dict)": ([24], 9)}
    assert len(acc.warm_up_seconds) == 5
    # A list of names warms up those alone.
    seen.clear()
    acc.restore()
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir,
                        warm_up=["shape_slat_flow_model_1024"])
    assert list(seen) == ["shape_slat_flow_model_1024 (state dict)"]
    seen.clear()
    acc.restore()
    t2.accelerate(full, device="cpu", cache_dir=cache_dir, warm_up="shape_slat_flow_model_512")
    assert list(seen) == ["shape_slat_flow_model_512 (state dict)"]


def test_a_warm_up_that_fails_is_reported_and_retried_on_first_use(tiny_config, tiny_state_dict,
                                                                   cache_dir):
    broken = dict(tiny_state_dict)
    del broken["out_layer.bias"]

    class Pipeline:
        pass
    p = Pipeline()
    p.models = {"shape_slat_flow_model_512": OriginalModule(tiny_config, broken)}
    acc = t2.accelerate(p, device="cpu", cache_dir=cache_dir)
    assert acc.warm_up(tokens=40, cond_tokens=SMALL) == {}
    assert "warm-up failed x1" in acc.report() and "out_layer.bias" in acc.report()
    assert acc.fallbacks()[0]["what"] == "warm_up"
    coords, cond = make_request([30], 2)
    model = p.models["shape_slat_flow_model_512"]
    model(SparseTensor(np.zeros((30, 32), np.float32), coords), np.full(1, 500.0, np.float32), cond)
    assert model.original.calls == 1      # the engine was tried again, and refused again
    assert "fell back to PyTorch (forward) x1" in acc.report()


def test_the_pipelines_device_decides_where_engines_warm_up(full, cache_dir):
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir)
    for wrong in ("tpu:0", "cuda:x", "mps"):
        full.device = wrong
        with pytest.raises(s3d.Error, match="device must be"):
            acc.warm_up(tokens=40, cond_tokens=SMALL)
    full.device = "cpu"
    acc.warm_up(["shape_slat_flow_model_512"], tokens=40, cond_tokens=SMALL)
    assert acc.models["shape_slat_flow_model_512"]._engine_device == ("cpu", 0)
    assert t2._device_tuple("cuda") == ("cuda", 0)
    assert t2._device_tuple("cuda:3") == ("cuda", 3)
    assert t2._device_tuple(("cuda", 1)) == ("cuda", 1)


def test_the_drop_in_keeps_its_engine_and_offloads_it(full, cache_dir):
    full.low_vram = True
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir)
    acc.warm_up(["shape_slat_flow_model_512"], tokens=40, cond_tokens=SMALL)
    model = full.models["shape_slat_flow_model_512"]
    engine = model._engine
    # In low_vram mode a warmed-up engine on a GPU is offloaded; the CPU backend's has no
    # device memory to free, and the pipeline's .cpu() leaves it as it is.
    assert engine.resident
    model._moved_to_cpu()
    assert engine.resident and model._engine is engine
    coords, cond = make_request([33, 20], 4)
    x = SparseTensor(s3d.draw_noise(4, 53, 32), coords)
    t = np.full(2, 800.0, np.float32)
    v = model(x, t, cond).feats
    # An explicit offload: the next call brings the weights back, same engine, same bits.
    model.offload()
    assert not engine.resident
    model.offload()
    assert engine.residency()["offloads"] == 1
    np.testing.assert_array_equal(model(x, t, cond).feats, v)
    assert model._engine is engine and engine.resident
    assert engine.residency()["reloads"] == 1
    assert "weights on the device" in acc.report() and "offloads 1, reloads 1" in acc.report()
    model.offload()
    assert "weights offloaded to host memory" in acc.report()
    assert acc.fallbacks() == []


def test_the_dense_drop_in_offloads_too(full, cache_dir):
    acc = t2.accelerate(full, device="cpu", cache_dir=cache_dir)
    noise, cond = dense_request(1, 8)
    model = full.models["sparse_structure_flow_model"]
    z = full.sample_sparse_structure(cond, noise)
    model.offload()
    np.testing.assert_array_equal(full.sample_sparse_structure(cond, noise), z)
    assert model._engine.residency()["reloads"] == 1
    assert acc.fallbacks() == []


def test_weights_that_need_a_conversion_are_copied_and_the_log_says_why(tiny_config,
                                                                       tiny_state_dict,
                                                                       cache_dir):
    # f32 arrays: the blocks' Linear layers run in bf16, so borrowing them would need a copy.
    lines = []
    e = s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, device="cpu",
                                   cache_dir=cache_dir, borrow=True, log=lines.append)
    assert e.residency()["weights_source"] == "own copy"
    assert any("copied, not borrowed" in line and "run-time dtype is bf16" in line
               for line in lines), lines
    coords, cond = make_request([41, 30], 5)
    ref = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir)
    np.testing.assert_array_equal(e.sample(coords, cond, seed=3, sampler=QUICK),
                                  ref.sample(coords, cond, seed=3, sampler=QUICK))
    assert ref.residency()["weights_source"] == "own copy"
    with pytest.raises(s3d.Error, match="borrow"):
        s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, device="cpu", borrow="yes")


def test_release_cache_and_workspaces_without_a_gpu(engine, cache_dir):
    assert engine.release_cache() == 0
    coords, cond = make_request([41], 6)
    latent = engine.sample(coords, cond, seed=4, sampler=QUICK)
    assert engine.release_cache() == 0
    np.testing.assert_array_equal(engine.sample(coords, cond, seed=4, sampler=QUICK), latent)
    with pytest.raises(s3d.Error, match="workspace must be a sparse3d_engine.Workspace"):
        s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, workspace="shared")
    with pytest.raises(s3d.Error, match="memory must be 'driver' or 'torch', got 'gpu'"):
        s3d.Workspace(0, memory="gpu")
    try:
        ws = s3d.Workspace(0)          # a GPU machine: one to share
        assert ws.device_index == 0 and ws.stats()["bytes_in_use"] == 0
    except s3d.Error as e:             # none here: refused by name, not a crash
        assert "no usable CUDA device" in str(e)
