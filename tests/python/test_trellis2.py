"""The TRELLIS.2 drop-in (s3d.trellis2) against duck-typed stand-ins: a pipeline with a
`models` dict (the five flow models) and flow samplers, SparseTensors of NumPy arrays, dense
volumes for the sparse-structure model, and "original" modules that record their calls (CI
has no torch; the H200 runs the drop-in against the PyTorch oracle:
scripts/device/run.sh python:package)."""
import numpy as np
import pytest

import sparse3d_engine as s3d
import sparse3d_engine.trellis2 as t2
from conftest import DENSE_C, DENSE_R, SparseTensor, dense_request, make_request

ARGS = ("resolution", "in_channels", "model_channels", "cond_channels", "out_channels",
        "num_blocks", "num_heads", "mlp_ratio", "pe_mode", "share_mod", "qk_rms_norm",
        "qk_rms_norm_cross")


class OriginalModule:
    """Stands for TRELLIS.2's SLatFlowModel: its attributes and state dict; a call records
    itself and returns a marker velocity."""

    def __init__(self, config, state_dict):
        for a in ARGS:
            setattr(self, a, config["args"][a])
        self.rope_freq = config["args"]["rope_freq"]
        self.dtype = "torch.bfloat16"
        self._state = state_dict
        self.calls = 0

    def state_dict(self):
        return self._state

    def __call__(self, x, t, cond, **kwargs):
        self.calls += 1
        return x.replace(np.full_like(x.feats, 0.25))


class SparseStructureFlowModel:
    """Stands for TRELLIS.2's dense SparseStructureFlowModel (found by its class name): its
    attributes, its position buffer and its state dict; called on a dense volume
    model(x, t, cond) (no concat_cond), a call records itself and returns a marker volume."""

    def __init__(self, config, state_dict):
        for a in ARGS:
            setattr(self, a, config["args"][a])
        self.dtype = "torch.bfloat16"
        D = config["args"]["model_channels"] // config["args"]["num_heads"]
        # The buffer the original registers (complex64 [R^3, D/2]); the engine computes its own.
        self.rope_phases = np.ones((self.resolution ** 3, D // 2), np.complex64)
        self._state = dict(state_dict, rope_phases=self.rope_phases)
        self.calls = 0

    def state_dict(self):
        return self._state

    def __call__(self, x, t, cond, **kwargs):   # keyword arguments: recorded, not read
        self.calls += 1
        assert x.shape[1:] == (self.in_channels,) + (self.resolution,) * 3
        return np.full_like(x, 0.25)


def _rows(x):
    return x.feats if hasattr(x, "feats") else x


def _with(x, values):
    return x.replace(values) if hasattr(x, "feats") else values


class FlowEulerGuidanceIntervalSampler:
    """TRELLIS.2's sampler structure, in NumPy: Euler steps of the guided velocity, CFG with
    the negative condition inside the interval, guidance rescale on x_0 per asset: over a
    SparseTensor the asset's rows (the population std, as the structured-latent stages), over
    a dense volume Tensor.std of each batch element (unbiased, as the original)."""

    def __init__(self, sigma_min=1e-5):
        self.sigma_min = sigma_min
        self.loops = 0

    # As TRELLIS.2's: guidance_rescale reaches the guidance mixin through **kwargs.
    def sample(self, model, noise, cond, neg_cond, steps=50, rescale_t=1.0,
               guidance_strength=3.0, guidance_interval=(0.0, 1.0), verbose=True,
               tqdm_desc="Sampling", **kwargs):
        guidance_rescale = kwargs.pop("guidance_rescale", 0.0)
        self.loops += 1
        ts = s3d.timesteps({"steps": steps, "rescale_t": rescale_t})
        x = noise
        sm = self.sigma_min
        B = cond.shape[0]
        for k in range(steps):
            t, t_prev = ts[k], ts[k + 1]
            tt = np.full((B,), 1000 * t, dtype=np.float32)
            g = guidance_strength if guidance_interval[0] <= t <= guidance_interval[1] else 1
            xf = _rows(x)
            v_pos = _rows(model(x, tt, cond, **kwargs))
            if g != 1:
                v_neg = _rows(model(x, tt, neg_cond, **kwargs))
                v = g * v_pos + (1 - g) * v_neg
                if guidance_rescale > 0:
                    x0_pos = (1 - sm) * xf - (sm + (1 - sm) * t) * v_pos
                    x0_cfg = (1 - sm) * xf - (sm + (1 - sm) * t) * v
                    if hasattr(x, "coords"):
                        ratio = np.empty((len(xf), 1), np.float32)
                        for b in range(B):
                            rows = x.coords[:, 0] == b
                            ratio[rows] = x0_pos[rows].std() / x0_cfg[rows].std()
                    else:
                        ratio = np.array([x0_pos[b].std(ddof=1) / x0_cfg[b].std(ddof=1)
                                          for b in range(B)], np.float32).reshape(B, 1, 1, 1, 1)
                    x0 = guidance_rescale * (x0_cfg * ratio) + (1 - guidance_rescale) * x0_cfg
                    v = ((1 - sm) * xf - x0) / (sm + (1 - sm) * t)
            else:
                v = v_pos
            x = _with(x, (xf - (t - t_prev) * v).astype(np.float32))
        return type("Out", (), {"samples": x, "pred_x_t": [], "pred_x_0": []})()


class Pipeline:
    def __init__(self, original):
        self.models = {"shape_slat_flow_model_512": original, "image_cond_model": object()}
        self.shape_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.tex_slat_sampler = FlowEulerGuidanceIntervalSampler()


PARAMS = dict(steps=4, rescale_t=3.0, guidance_strength=7.5, guidance_interval=(0.6, 1.0),
              guidance_rescale=0.5, verbose=False)


@pytest.fixture
def pipeline(tiny_config, tiny_state_dict):
    return Pipeline(OriginalModule(tiny_config, tiny_state_dict))


@pytest.fixture
def acc(pipeline, cache_dir):
    return t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir)


def request(counts=(41, 30), seed=11):
    coords, cond = make_request(list(counts), seed)
    noise = SparseTensor(s3d.draw_noise(seed, len(coords), 32), coords)
    return noise, cond


def test_accelerate_replaces_the_flow_models_and_samplers(pipeline, acc):
    model = pipeline.models["shape_slat_flow_model_512"]
    assert isinstance(model, t2.EngineFlowModel)
    assert pipeline.models["image_cond_model"] is not model   # other models untouched
    assert model.resolution == 64 and model.out_channels == 32   # the attributes it reads
    assert model.config_source == "module attributes"
    original = model.original
    original.custom = "kept"                 # anything else reads through to the original
    assert model.custom == "kept" and model.dtype == original.dtype
    assert str(model.device) == "cpu"        # no engine yet: the original's (here none: cpu)
    with pytest.raises(AttributeError):
        model.no_such_attribute
    assert isinstance(pipeline.shape_slat_sampler, t2.EngineSampler)
    assert pipeline.shape_slat_sampler.sigma_min == 1e-5        # attributes pass through
    assert "shape_slat_flow_model_512: sparse3d engine" in acc.report()


def test_the_whole_loop_runs_in_the_engine_bit_for_bit(pipeline, acc, tiny_config, cache_dir):
    noise, cond = request()
    neg = np.zeros_like(cond)
    out = pipeline.shape_slat_sampler.sample(pipeline.models["shape_slat_flow_model_512"],
                                             noise, cond, neg, **PARAMS)
    assert out.samples.coords is noise.coords
    engine = s3d.Engine(_tiny(), device="cpu",
                             cache_dir=cache_dir)
    direct = engine.sample(noise.coords, cond, noise=noise.feats,
                           sampler=s3d.SamplerSettings(steps=4))
    np.testing.assert_array_equal(out.samples.feats, direct)
    assert pipeline.shape_slat_sampler.original.loops == 0      # the original never ran
    assert pipeline.models["shape_slat_flow_model_512"].original.calls == 0
    assert acc.fallbacks() == []
    assert "whole loops in the engine 1" in acc.report()


def _tiny():
    from conftest import TINY
    return TINY


@pytest.mark.parametrize("settings, reason", [
    (dict(steps=2.5), "steps must be an integer, got 2.5 (float)"),
    (dict(steps="3"), "steps must be an integer, got '3' (str)"),
    (dict(steps=0), "steps must be an integer in [1, 2147483647], got 0"),
    (dict(rescale_t=float("nan")), "rescale_t must be finite, got nan"),
    (dict(guidance_strength="7"), "guidance_strength must be a real number, got '7' (str)"),
    (dict(guidance_interval=("a", 1.0)),
     "guidance_interval[0] must be a real number, got 'a' (str)"),
    (dict(guidance_interval=5), "TypeError: 'int' object is not subscriptable"),
    (dict(guidance_rescale="x"), "guidance_rescale must be a real number, got 'x' (str)"),
    (dict(steps=2.5, guidance_interval=5), "steps must be an integer, got 2.5 (float)"),
    (dict(mystery=1), "arguments the engine's loop does not take: mystery"),
])
def test_settings_the_engine_cannot_take_as_they_are_run_the_original(pipeline, acc, settings,
                                                                      reason):
    """TRELLIS.2's keyword arguments are read once (_trellis2_args), each value as it is and
    named as TRELLIS.2 names it; one the engine cannot take runs the original sampler."""
    model, sampler = pipeline.models["shape_slat_flow_model_512"], pipeline.shape_slat_sampler
    ran = []
    sampler.original.sample = lambda *a, **k: ran.append(k) or "the original's result"
    noise, cond = request((20, 20), 13)
    kwargs = dict(PARAMS, **settings)
    assert sampler.sample(model, noise, cond, np.zeros_like(cond), **kwargs) == \
        "the original's result"
    assert ran == [kwargs] and model._engine is None   # no engine built, nothing ran
    assert [(f["what"], f["reason"]) for f in acc.fallbacks()] == [("sample", reason)]


class _Recorder:
    """Stands between an Engine and its native engine: records each call made on it."""

    def __init__(self, native):
        self._native, self.calls = native, []

    def __getattr__(self, name):
        attr = getattr(self._native, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls.append((name, args))
            return attr(*args, **kwargs)
        return call


def test_the_one_call_into_the_engine_makes_room_and_releases(engine, dense_config,
                                                              dense_state_dict, cache_dir):
    """Engine._sample, the drop-in's one way into the engine (docs/PYTHON.md, "The drop-in's
    sample call"): the weights come back, then make_room() runs when the request would not
    fit with the engine's flags (fits()), then the loop, then release_cache; otherwise it is
    Engine.sample, bit for bit."""
    noise, cond = request()
    settings = s3d.SamplerSettings(steps=2)
    want = engine.sample(noise.coords, cond, noise=noise.feats, sampler=settings)
    engine.offload()
    recorder = engine._e = _Recorder(engine._e)
    room = []
    got = engine._sample(noise.coords, cond, noise.feats, None, None,
                         settings=settings._native(), make_room=lambda: room.append(1),
                         release_cache=True)
    np.testing.assert_array_equal(got, want)
    assert [c[0] for c in recorder.calls] == ["reload", "fits", "sample", "release_cache"]
    assert recorder.calls[1][1] == (71, 2, 9, None) and room == []   # it fits: no room made
    assert engine.residency()["reloads"] == 1
    # A request that does not fit: make_room() first (then the engine refuses it here). A
    # dense model's volumes count B R^3 tokens.
    small = s3d.Engine.from_state_dict(dense_config, dense_state_dict, device="cpu",
                                       cache_dir=cache_dir, max_device_memory_gib=1e-4)
    recorder = small._e = _Recorder(small._e)
    volume, dcond = dense_request(2, 3)
    with pytest.raises(s3d.Error, match="nothing was run"):
        small._sample(None, dcond, volume, None, None, settings=settings._native(),
                      make_room=lambda: room.append(1))
    assert room == [1] and ("fits", (2 * DENSE_R ** 3, 2, 9, None)) in recorder.calls


def test_the_original_sampler_over_the_drop_in_matches_the_engine_loop(pipeline, acc):
    """TRELLIS.2's own sampler arithmetic (here in NumPy) calling the engine-backed model
    once per forward: close to the engine's whole loop (the sampler's rounding differs)."""
    noise, cond = request((37, 52), 12)
    model = pipeline.models["shape_slat_flow_model_512"]
    loop = pipeline.shape_slat_sampler.original.sample(model, noise, cond, np.zeros_like(cond),
                                                       **PARAMS)
    whole = pipeline.shape_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), **PARAMS)
    a, b = loop.samples.feats, whole.samples.feats
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    assert rel < 1e-4, rel
    assert model.stats.calls["forward"] == 4 + 3   # 4 steps, CFG on the 3 inside [0.6, 1]
    assert model.original.calls == 0


def test_what_the_engine_cannot_serve_runs_on_the_original_and_is_counted(pipeline, acc):
    model = pipeline.models["shape_slat_flow_model_512"]
    sampler = pipeline.shape_slat_sampler
    noise, cond = request((20, 20), 13)
    # A negative condition that is not zero: the original sampler (which calls the model,
    # which the engine serves per forward).
    sampler.sample(model, noise, cond, np.ones_like(cond), **PARAMS)
    assert sampler.original.loops == 1
    # Rows out of batch order: the original module.
    shuffled = SparseTensor(noise.feats[::-1].copy(), noise.coords[::-1].copy())
    v = model(shuffled, np.full(2, 500.0, np.float32), cond)
    assert model.original.calls == 1 and (v.feats == 0.25).all()
    # A keyword argument the engine does not take: the original module.
    model(noise, np.full(2, 500.0, np.float32), cond, mystery=1)
    assert model.original.calls == 2
    # A request the engine refuses (a condition of the wrong width): the original, with the
    # engine's message as the reason.
    model(noise, np.full(2, 500.0, np.float32), cond[:, :, :7].copy())
    assert model.original.calls == 3
    reasons = [f["reason"] for f in acc.fallbacks()]
    assert any("not zero" in r for r in reasons)
    assert any("batch order" in r for r in reasons)
    assert any("mystery" in r for r in reasons)
    assert any("cond" in r for r in reasons)
    report = acc.report()
    assert "fell back to PyTorch (forward) x1" in report and "ran the original sampler x1" in report


def test_an_unusable_module_stays_on_pytorch(tiny_config, tiny_state_dict, cache_dir):
    class NotAFlowModel:
        pass
    p = Pipeline(NotAFlowModel())
    acc = t2.accelerate(p, device="cpu", cache_dir=cache_dir)
    assert isinstance(p.models["shape_slat_flow_model_512"], NotAFlowModel)
    assert "not a SLatFlowModel" in acc.skipped["shape_slat_flow_model_512"]
    assert "left on PyTorch" in acc.report()


def test_checkpoints_load_from_the_pipeline_folder_and_restore_undoes(pipeline, cache_dir, tmp_path):
    import shutil
    from conftest import TINY
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    shutil.copy(TINY, ckpts / "shape_slat_flow_model_512.json")
    shutil.copy(TINY[:-5] + ".safetensors", ckpts / "shape_slat_flow_model_512.safetensors")
    original = pipeline.models["shape_slat_flow_model_512"]
    acc = t2.accelerate(pipeline, pipeline_dir=str(tmp_path), device="cpu", cache_dir=cache_dir)
    model = pipeline.models["shape_slat_flow_model_512"]
    assert model.config_source.endswith("shape_slat_flow_model_512.json")
    noise, cond = request((15,), 14)
    v = model(noise, np.full(1, 700.0, np.float32), cond)
    assert v.feats.shape == (15, 32) and original.calls == 0
    acc.restore()
    assert pipeline.models["shape_slat_flow_model_512"] is original
    assert isinstance(pipeline.shape_slat_sampler, FlowEulerGuidanceIntervalSampler)


def test_a_texture_model_takes_its_concat_condition(tiny_config, tiny_state_dict, cache_dir):
    """A texture flow model (in_channels = out + concat channels): the sampler passes the
    shape latent as concat_cond through **kwargs, as TRELLIS.2's pipeline does; the whole
    loop in the engine equals Engine.sample with that concat_cond, and a model call takes it
    too."""
    config, state = _texture(tiny_config, tiny_state_dict)
    rng = np.random.default_rng(6)
    original = OriginalModule(config, state)
    p = Pipeline(original)
    p.models = {"tex_slat_flow_model_512": original}
    acc = t2.accelerate(p, device="cpu", cache_dir=cache_dir)
    model = p.models["tex_slat_flow_model_512"]
    noise, cond = request((26, 31), 15)
    shape_slat = SparseTensor(rng.standard_normal((57, 8)).astype(np.float32), noise.coords)
    out = p.tex_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), concat_cond=shape_slat,
                                    **PARAMS)
    engine = s3d.Engine.from_state_dict(config, state, device="cpu", cache_dir=cache_dir)
    want = engine.sample(noise.coords, cond, noise=noise.feats, concat_cond=shape_slat.feats,
                         sampler=s3d.SamplerSettings(steps=4))
    np.testing.assert_array_equal(out.samples.feats, want)
    v = model(noise, np.full(2, 1000.0, np.float32), cond, concat_cond=shape_slat)
    np.testing.assert_array_equal(
        v.feats, engine.forward(noise.feats, 1000.0, cond, shape_slat.feats, coords=noise.coords))
    assert original.calls == 0 and acc.fallbacks() == []


# ---- The five flow models: the dense sparse-structure model beside the four SLat ones ----

SS_PARAMS = dict(steps=4, rescale_t=5.0, guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                 guidance_rescale=0.7)
SS_SETTINGS = s3d.SamplerSettings(steps=4, rescale_t=5.0, guidance_rescale=0.7)


class FullPipeline:
    """Trellis2ImageTo3DPipeline's flow models and samplers: all five models and the three
    samplers with their parameters (the sparse-structure ones as the released pipeline.json,
    with fewer steps)."""

    def __init__(self, dense, slat, tex):
        self.models = {"sparse_structure_flow_model": dense,
                       "shape_slat_flow_model_512": slat, "shape_slat_flow_model_1024": slat,
                       "tex_slat_flow_model_512": tex, "tex_slat_flow_model_1024": tex,
                       "sparse_structure_decoder": object(), "image_cond_model": object()}
        self.sparse_structure_sampler = FlowEulerGuidanceIntervalSampler()
        self.shape_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.tex_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.sparse_structure_sampler_params = dict(SS_PARAMS)

    def sample_sparse_structure(self, cond, noise):
        """As the pipeline: the sampler over the model with a zero negative condition."""
        return self.sparse_structure_sampler.sample(
            self.models["sparse_structure_flow_model"], noise, cond, np.zeros_like(cond),
            **self.sparse_structure_sampler_params, verbose=False).samples


def _texture(tiny_config, tiny_state_dict):
    import copy
    config = copy.deepcopy(tiny_config)
    config["args"]["in_channels"] = 40
    state = dict(tiny_state_dict)
    rng = np.random.default_rng(5)
    extra = (0.02 * rng.standard_normal((128, 8))).astype(np.float32)
    state["input_layer.weight"] = np.concatenate([state["input_layer.weight"], extra], axis=1)
    return config, state


@pytest.fixture
def full(tiny_config, tiny_state_dict, dense_config, dense_state_dict):
    tex_config, tex_state = _texture(tiny_config, tiny_state_dict)
    return FullPipeline(SparseStructureFlowModel(dense_config, dense_state_dict),
                        OriginalModule(tiny_config, tiny_state_dict),
                        OriginalModule(tex_config, tex_state))


@pytest.fixture
def full_acc(full, cache_dir):
    return t2.accelerate(full, device="cpu", cache_dir=cache_dir)


def test_all_five_flow_models_and_three_samplers_are_served(full, full_acc):
    assert t2.FLOW_MODELS == ("sparse_structure_flow_model", "shape_slat_flow_model_512",
                              "shape_slat_flow_model_1024", "tex_slat_flow_model_512",
                              "tex_slat_flow_model_1024")
    assert t2.FLOW_SAMPLERS == ("sparse_structure_sampler", "shape_slat_sampler",
                                "tex_slat_sampler")
    assert sorted(full_acc.models) == sorted(t2.FLOW_MODELS)
    assert sorted(full_acc.samplers) == sorted(t2.FLOW_SAMPLERS)
    assert full_acc.skipped == {}
    for name in t2.FLOW_MODELS:
        assert isinstance(full.models[name], t2.EngineFlowModel)
    assert not isinstance(full.models["sparse_structure_decoder"], t2.EngineFlowModel)
    dense = full.models["sparse_structure_flow_model"]
    assert dense.family == "SparseStructureFlowModel"
    assert full.models["tex_slat_flow_model_1024"].family == "SLatFlowModel"
    # What the pipeline reads for the noise: resolution and in_channels.
    assert (dense.resolution, dense.in_channels) == (DENSE_R, DENSE_C)
    report = full_acc.report()
    for name in t2.FLOW_MODELS:
        assert f"{name}: sparse3d engine" in report
    assert "sparse_structure_flow_model: sparse3d engine (SparseStructureFlowModel;" in report
    for name in t2.FLOW_SAMPLERS:
        assert f"{name}: whole loops in the engine 0" in report


def test_the_dense_config_comes_from_the_module(full, full_acc, dense_config):
    model = full.models["sparse_structure_flow_model"]
    config, source = t2.config_of_module(model.original)
    assert source == "module attributes"
    want = dict(dense_config["args"])
    del want["initialization"]             # training only; not read from the module
    assert config == {"name": "SparseStructureFlowModel", "args": want}
    assert "rope_freq" not in config["args"]   # ignored by the dense model: not passed


def test_the_family_rule(tiny_config, tiny_state_dict, dense_config, dense_state_dict):
    assert t2.family_of_module(SparseStructureFlowModel(dense_config, dense_state_dict)) == \
        "SparseStructureFlowModel"
    assert t2.family_of_module(OriginalModule(tiny_config, tiny_state_dict)) == "SLatFlowModel"

    class Renamed:                         # another class name, the dense model's buffer
        pass
    m = Renamed()
    m.pos_emb = np.zeros((8, 8), np.float32)
    assert t2.family_of_module(m) == "SparseStructureFlowModel"

    class Derived(SparseStructureFlowModel):   # a subclass of the named class
        pass
    d = Derived(dense_config, dense_state_dict)
    del d.rope_phases
    assert t2.family_of_module(d) == "SparseStructureFlowModel"


def test_the_dense_model_is_served_per_forward(full, full_acc, dense_config, dense_state_dict,
                                               cache_dir):
    model = full.models["sparse_structure_flow_model"]
    noise, cond = dense_request(2, 21)
    t = np.array([1000.0, 700.0], np.float32)
    v = model(noise, t, cond)
    assert isinstance(v, np.ndarray) and v.shape == noise.shape and v.dtype == noise.dtype
    engine = s3d.Engine.from_state_dict(dense_config, dense_state_dict, device="cpu",
                                             cache_dir=cache_dir)
    np.testing.assert_array_equal(v, engine.forward(noise, t, cond))
    assert model.original.calls == 0 and model.stats.calls["forward"] == 1
    assert full_acc.fallbacks() == []
    # fit_memory (the default): the default path without CUDA graphs.
    assert ("sparse_structure_flow_model: sparse3d engine (SparseStructureFlowModel; path "
            f"{s3d.default_path()}-cuda_graphs; config from module attributes); forward calls "
            "served 1") in full_acc.report()


def test_the_dense_whole_loop_runs_in_the_engine_bit_for_bit(full, full_acc, dense_config,
                                                              dense_state_dict, cache_dir):
    noise, cond = dense_request(1, 22)
    z_s = full.sample_sparse_structure(cond, noise)
    assert isinstance(z_s, np.ndarray) and z_s.shape == noise.shape
    engine = s3d.Engine.from_state_dict(dense_config, dense_state_dict, device="cpu",
                                             cache_dir=cache_dir)
    np.testing.assert_array_equal(z_s, engine.sample(cond=cond, noise=noise, sampler=SS_SETTINGS))
    # The same as the token-mode request the CLI makes of a payload (full grid, raster order).
    from conftest import grid_coords, to_tokens, to_volume
    tok = engine.sample(grid_coords(1), cond, noise=to_tokens(noise), sampler=SS_SETTINGS)
    np.testing.assert_array_equal(z_s, to_volume(tok, 1))
    model = full.models["sparse_structure_flow_model"]
    assert full.sparse_structure_sampler.original.loops == 0
    assert model.original.calls == 0 and model.stats.calls.get("forward", 0) == 0
    assert full_acc.fallbacks() == []
    assert "sparse_structure_sampler: whole loops in the engine 1" in full_acc.report()


def test_the_dense_original_sampler_over_the_drop_in_matches_the_engine_loop(full, full_acc):
    """TRELLIS.2's sampler arithmetic (NumPy, the unbiased std of a dense tensor) calling the
    engine-backed dense model once per forward: close to the engine's whole loop."""
    noise, cond = dense_request(2, 23)
    model = full.models["sparse_structure_flow_model"]
    loop = full.sparse_structure_sampler.original.sample(model, noise, cond, np.zeros_like(cond),
                                                         **SS_PARAMS, verbose=False).samples
    whole = full.sample_sparse_structure(cond, noise)
    rel = np.linalg.norm(loop - whole) / np.linalg.norm(whole)
    # The sampler's own arithmetic (NumPy f32, TRELLIS.2's order) against the engine's: 1e-4 on
    # paths of bitwise kernels. The default path `fast` rounds its norms once (tolerance
    # kernels), and guidance 7.5 with rescale 0.7 amplifies the sampler's differences through
    # the model: 6.9e-4 measured on this tiny model, far inside the path's 2e-2 contract.
    bound = 2e-3 if "fast" in s3d.default_path() else 1e-4
    assert rel < bound, rel
    assert model.stats.calls["forward"] == 4 + 4   # r = 5: all 4 steps' t are in [0.6, 1]
    assert model.original.calls == 0


def test_what_the_dense_engine_cannot_serve_runs_on_the_original(full, full_acc):
    model = full.models["sparse_structure_flow_model"]
    sampler = full.sparse_structure_sampler
    noise, cond = dense_request(1, 24)
    t = np.full(1, 500.0, np.float32)
    # A negative condition that is not zero: the original sampler over the engine's forwards.
    out = sampler.sample(model, noise, cond, np.ones_like(cond), **SS_PARAMS, verbose=False)
    assert sampler.original.loops == 1 and out.samples.shape == noise.shape
    assert model.original.calls == 0
    # A keyword argument the dense call does not take: the original module.
    model(noise, t, cond, mystery=1)
    # A condition the engine refuses (wrong width): the original, the engine's message as reason.
    model(noise, t, np.ascontiguousarray(cond[:, :, :7]))
    # A SparseTensor given to the dense model: the original (which asserts a volume, as
    # TRELLIS.2's does).
    coords, _ = make_request([10], 1)
    with pytest.raises(AssertionError):
        model(SparseTensor(np.zeros((10, 8), np.float32), coords), t, cond)
    assert model.original.calls == 3
    reasons = [f["reason"] for f in full_acc.fallbacks()]
    assert any("not zero" in r for r in reasons)
    assert any("mystery" in r for r in reasons)
    assert any("cond" in r and "mystery" not in r and "zero" not in r for r in reasons)
    assert any("SparseTensor" in r and "dense volume" in r for r in reasons)
    assert "ran the original sampler x" in full_acc.report()


def test_a_slat_sampler_given_a_dense_tensor_falls_back(full, full_acc):
    """The wrong kind of noise for the model is a counted fallback, not an AttributeError."""
    sampler = full.shape_slat_sampler
    noise, cond = dense_request(1, 25)
    with pytest.raises(Exception):   # the NumPy original sampler cannot run it either
        sampler.sample(full.models["shape_slat_flow_model_512"], noise, cond,
                       np.zeros_like(cond), **PARAMS)
    assert any("not a SparseTensor" in f["reason"] for f in full_acc.fallbacks())


def test_texture_models_take_concat_cond_per_forward_and_whole_loop(full, full_acc,
                                                                    tiny_config, tiny_state_dict,
                                                                    cache_dir):
    """Both texture models of the pipeline: the sampler passes the shape latent as
    concat_cond (**kwargs, as TRELLIS.2's pipeline), served as one whole loop; TRELLIS.2's
    own sampler arithmetic passes it on to every model call, served per forward."""
    tex_config, tex_state = _texture(tiny_config, tiny_state_dict)
    engine = s3d.Engine.from_state_dict(tex_config, tex_state, device="cpu",
                                             cache_dir=cache_dir)
    rng = np.random.default_rng(26)
    for name in ("tex_slat_flow_model_512", "tex_slat_flow_model_1024"):
        model = full.models[name]
        noise, cond = request((19, 28), 27)
        shape_slat = SparseTensor(rng.standard_normal((47, 8)).astype(np.float32), noise.coords)
        whole = full.tex_slat_sampler.sample(model, noise, cond, np.zeros_like(cond),
                                             concat_cond=shape_slat, **PARAMS).samples
        want = engine.sample(noise.coords, cond, noise=noise.feats, concat_cond=shape_slat.feats,
                             sampler=s3d.SamplerSettings(steps=4))
        np.testing.assert_array_equal(whole.feats, want)
        loop = full.tex_slat_sampler.original.sample(model, noise, cond, np.zeros_like(cond),
                                                     concat_cond=shape_slat, **PARAMS).samples
        rel = np.linalg.norm(loop.feats - want) / np.linalg.norm(want)
        assert rel < 1e-4, rel
        # Without the concat_cond the loop differs: it was used.
        plain = engine.sample(noise.coords, cond, noise=noise.feats,
                              concat_cond=np.zeros_like(shape_slat.feats),
                              sampler=s3d.SamplerSettings(steps=4))
        assert not np.array_equal(plain, want)
        assert model.stats.calls["forward"] >= 7
    assert full.tex_slat_sampler.original.loops == 2   # the two direct calls only
    assert full.models["tex_slat_flow_model_512"].original.calls == 0
    assert full_acc.fallbacks() == []
    assert "tex_slat_sampler: whole loops in the engine 2" in full_acc.report()


# ---- What the drop-in cannot serve, of any kind, is a counted fallback, not an exception ----

def test_a_checkpoint_json_that_is_not_an_object_leaves_the_model_on_pytorch(pipeline, cache_dir,
                                                                            tmp_path):
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2, 3]")
    original = pipeline.models["shape_slat_flow_model_512"]
    acc = t2.accelerate(pipeline, checkpoints={"shape_slat_flow_model_512": str(listing)},
                        device="cpu", cache_dir=cache_dir)
    assert pipeline.models["shape_slat_flow_model_512"] is original
    why = acc.skipped["shape_slat_flow_model_512"]
    assert why == f"{listing}: the config is a list, not a JSON object " \
                  '{"name": ..., "args": {...}}'
    assert f"shape_slat_flow_model_512: left on PyTorch: {why}" in acc.report()


def test_a_sampler_without_sample_is_left_as_it_is(pipeline, cache_dir):
    class NotASampler:
        pass
    odd = NotASampler()
    pipeline.shape_slat_sampler = odd
    acc = t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir)
    assert pipeline.shape_slat_sampler is odd
    assert acc.skipped["shape_slat_sampler"] == \
        "NotASampler has no sample() method: not a flow sampler"
    assert isinstance(pipeline.tex_slat_sampler, t2.EngineSampler)   # the others are wrapped
    assert "shape_slat_sampler: left on PyTorch" in acc.report()


def test_a_module_without_a_state_dict_runs_on_the_original(tiny_config, tiny_state_dict,
                                                            cache_dir):
    class NoStateDict(OriginalModule):
        state_dict = None
    p = Pipeline(NoStateDict(tiny_config, tiny_state_dict))
    acc = t2.accelerate(p, device="cpu", cache_dir=cache_dir)
    model = p.models["shape_slat_flow_model_512"]
    noise, cond = request((20, 20), 31)
    v = model(noise, np.full(2, 500.0, np.float32), cond)
    assert model.original.calls == 1 and (v.feats == 0.25).all()
    # The whole loop: the original sampler, over the model (which falls back per call too).
    p.shape_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), **PARAMS)
    assert p.shape_slat_sampler.original.loops == 1
    # A warm-up: reported, not raised.
    assert acc.warm_up(device="cpu") == {}
    why = ("the module has no state_dict() to read its weights from (pass checkpoints= or "
           "pipeline_dir= to load them from files)")
    whats = {(f["what"], f["reason"]) for f in acc.fallbacks()}
    assert {("forward", why), ("sample", why), ("warm_up", why)} <= whats


def test_list_features_run_on_the_original(pipeline, acc):
    model = pipeline.models["shape_slat_flow_model_512"]
    sampler = pipeline.shape_slat_sampler
    noise, cond = request((20, 20), 32)
    listed = SparseTensor(noise.feats.tolist(), noise.coords)
    v = model(listed, np.full(2, 500.0, np.float32), cond)
    assert model.original.calls == 1 and (np.asarray(v.feats) == 0.25).all()
    ran = []
    sampler.original.sample = lambda *a, **k: ran.append(a) or "the original's result"
    assert sampler.sample(model, listed, cond, np.zeros_like(cond), **PARAMS) == \
        "the original's result"
    assert len(ran) == 1
    reasons = {(f["what"], f["reason"]) for f in acc.fallbacks()}
    assert ("forward", "x.feats is a list, not a tensor") in reasons
    assert ("sample", "the noise is a list, not a tensor") in reasons
    assert model.stats.calls.get("forward", 0) == 0


# ---- the caller's mistakes raise; what the drop-in cannot serve is a counted fallback ----------

def test_an_unknown_keyword_is_a_type_error(pipeline, cache_dir):
    original = pipeline.models["shape_slat_flow_model_512"]
    with pytest.raises(TypeError, match=r"^accelerate\(\) got an unexpected keyword argument "
                                        r"'bogus' \(engine options: device, "):
        t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir, bogus=1)
    # Nothing was replaced.
    assert pipeline.models["shape_slat_flow_model_512"] is original
    assert not isinstance(pipeline.shape_slat_sampler, t2.EngineSampler)


@pytest.mark.parametrize("kwargs, message", [
    (dict(checkpoints=[1]), "accelerate: checkpoints must be a mapping {model name: NAME.json} "
                            "or None, got list"),
    (dict(checkpoints={"shape_slat_flow_model_512": None}),
     "accelerate: checkpoints['shape_slat_flow_model_512'] must be a str or an os.PathLike, "
     "got None (NoneType)"),
    (dict(checkpoints={1: "x.json"}), "accelerate: checkpoints' keys must be model names "
                                      "(str), got 1 (int)"),
    (dict(pipeline_dir=3), "accelerate: pipeline_dir must be a str or an os.PathLike, got 3"),
    (dict(path=1), "accelerate: path must be a str, got 1 (int)"),
    (dict(models="shape_slat_flow_model_512"), "accelerate: models must be a sequence of "
                                               "names (str), got 'shape_slat_flow_model_512'"),
    (dict(samplers=[None]), "accelerate: samplers must hold names (str), got None"),
    (dict(release_on_cpu="no"), "accelerate: release_on_cpu must be True or False, got 'no'"),
    (dict(warm_up=1), "accelerate: warm_up must be a sequence of names (str), got 1"),
    (dict(workspace_memory="cuda"), "accelerate: workspace_memory must be 'torch' or 'driver', "
                                    "got 'cuda'"),
    (dict(cache_dir=None), "accelerate: cache_dir must be a str or an os.PathLike, got None"),
    (dict(max_device_memory_gib="2"), "accelerate: max_device_memory_gib must be a real "
                                      "number, got '2' (str)"),
    (dict(log="yes"), "accelerate: log must be a callable or None, got str"),
    (dict(devices="0,1"), "accelerate: devices must be a sequence of CUDA device ordinals, "
                          "got '0,1'"),
    (dict(devices=[0, None]), "accelerate: devices must be an integer, got None"),
    (dict(parallel_min_tokens=0.5), "accelerate: parallel_min_tokens must be an integer, "
                                    "got 0.5"),
    # The engine's own value checks, run before anything is replaced.
    (dict(qualify_m=[-64]), "accelerate: qualify_m: candidate M must be in [1, 1048576], "
                            "got -64"),
    (dict(devices=[0, 0]), "accelerate: devices: device 0 is listed twice"),
    # A warm-up that could only fail after the replacement.
    (dict(warm_up="bogus"), "accelerate: warm_up names 'bogus', which is not among the models "
                            "it accelerates here (shape_slat_flow_model_512)"),
    (dict(warm_up=["shape_slat_flow_model_512", "tex_slat_flow_model_1024"]),
     "accelerate: warm_up names 'tex_slat_flow_model_1024', which is not among the models"),
    (dict(warm_up=["image_cond_model"]), "accelerate: warm_up names 'image_cond_model'"),
])
def test_an_option_of_the_wrong_type_is_refused_by_name(pipeline, cache_dir, kwargs, message):
    original = pipeline.models["shape_slat_flow_model_512"]
    options = dict(device="cpu", cache_dir=cache_dir)
    options.update(kwargs)
    with pytest.raises(s3d.Error) as e:
        t2.accelerate(pipeline, **options)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)
    assert pipeline.models["shape_slat_flow_model_512"] is original


def test_a_pipeline_device_the_warm_up_cannot_use_is_refused_before_anything_changes(
        pipeline, cache_dir):
    original = pipeline.models["shape_slat_flow_model_512"]
    pipeline.device = "tpu:0"
    with pytest.raises(s3d.Error, match=r"^accelerate: warm_up runs on the pipeline's device, "
                                        r"and device must be "):
        t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir, warm_up=True)
    assert pipeline.models["shape_slat_flow_model_512"] is original
    assert not isinstance(pipeline.shape_slat_sampler, t2.EngineSampler)
    # Without a warm-up the pipeline's device is never read: accepted.
    t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir).restore()


def test_whatever_raises_during_the_replacement_puts_everything_back(pipeline, cache_dir,
                                                                    monkeypatch):
    original = pipeline.models["shape_slat_flow_model_512"]
    sampler = pipeline.shape_slat_sampler

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(t2.Acceleration, "warm_up", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t2.accelerate(pipeline, device="cpu", cache_dir=cache_dir, warm_up=True)
    assert pipeline.models["shape_slat_flow_model_512"] is original
    assert pipeline.shape_slat_sampler is sampler


def test_the_engine_refuses_the_same_devices_and_qualify_m():
    from conftest import TINY
    tiny_checkpoint = TINY
    with pytest.raises(s3d.Error, match=r"^devices: device 1 is listed twice$"):
        s3d.Engine(tiny_checkpoint, device="cpu", devices=[1, 0, 1])
    with pytest.raises(s3d.Error, match=r"^qualify_m: candidate M must be in \[1, 1048576\], "
                                        r"got 0$"):
        s3d.Engine(tiny_checkpoint, device="cpu", qualify_m=[64, 0])


def test_what_the_pipeline_holds_is_still_a_counted_fallback(pipeline, cache_dir, tmp_path):
    """The caller's arguments right, the pipeline's content unservable: no error."""
    listing = tmp_path / "list.json"
    listing.write_text("[]")
    acc = t2.accelerate(pipeline, checkpoints={"shape_slat_flow_model_512": listing},
                        device="cpu", cache_dir=cache_dir)   # an os.PathLike is a path
    assert "shape_slat_flow_model_512" in acc.skipped
    assert set(t2.ENGINE_OPTIONS) >= {"cache_dir", "log", "max_device_memory_gib", "devices",
                                      "parallel_min_tokens"}
