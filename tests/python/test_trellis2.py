"""The TRELLIS.2 drop-in (sparse3d.trellis2) against duck-typed stand-ins: a pipeline with a
`models` dict and flow samplers, SparseTensors of NumPy arrays, and an "original" module
that records its calls (CI has no torch; the H200 runs the drop-in against the PyTorch
oracle: scripts/device/python_package.sh)."""
import numpy as np
import pytest

import sparse3d
import sparse3d.trellis2 as t2
from conftest import SparseTensor, make_request

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


class FlowEulerGuidanceIntervalSampler:
    """TRELLIS.2's sampler structure, in NumPy: Euler steps of the guided velocity, CFG with
    the negative condition inside the interval, guidance rescale on x_0 per asset."""

    def __init__(self, sigma_min=1e-5):
        self.sigma_min = sigma_min
        self.loops = 0

    # As TRELLIS.2's: guidance_rescale reaches the guidance mixin through **kwargs.
    def sample(self, model, noise, cond, neg_cond, steps=50, rescale_t=1.0,
               guidance_strength=3.0, guidance_interval=(0.0, 1.0), verbose=True,
               tqdm_desc="Sampling", **kwargs):
        guidance_rescale = kwargs.pop("guidance_rescale", 0.0)
        self.loops += 1
        ts = sparse3d.timesteps({"steps": steps, "rescale_t": rescale_t})
        x = noise
        sm = self.sigma_min
        B = cond.shape[0]
        for k in range(steps):
            t, t_prev = ts[k], ts[k + 1]
            tt = np.full((B,), 1000 * t, dtype=np.float32)
            g = guidance_strength if guidance_interval[0] <= t <= guidance_interval[1] else 1
            v_pos = model(x, tt, cond, **kwargs).feats
            if g != 1:
                v_neg = model(x, tt, neg_cond, **kwargs).feats
                v = g * v_pos + (1 - g) * v_neg
                if guidance_rescale > 0:
                    x0_pos = (1 - sm) * x.feats - (sm + (1 - sm) * t) * v_pos
                    x0_cfg = (1 - sm) * x.feats - (sm + (1 - sm) * t) * v
                    ratio = np.empty((len(x.feats), 1), np.float32)
                    for b in range(B):
                        rows = x.coords[:, 0] == b
                        ratio[rows] = x0_pos[rows].std() / x0_cfg[rows].std()
                    x0 = guidance_rescale * (x0_cfg * ratio) + (1 - guidance_rescale) * x0_cfg
                    v = ((1 - sm) * x.feats - x0) / (sm + (1 - sm) * t)
            else:
                v = v_pos
            x = x.replace((x.feats - (t - t_prev) * v).astype(np.float32))
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
    noise = SparseTensor(sparse3d.draw_noise(seed, len(coords), 32), coords)
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
    engine = sparse3d.Engine(_tiny(), device="cpu",
                             cache_dir=cache_dir)
    direct = engine.sample(noise.coords, cond, noise=noise.feats,
                           sampler=sparse3d.SamplerSettings(steps=4))
    np.testing.assert_array_equal(out.samples.feats, direct)
    assert pipeline.shape_slat_sampler.original.loops == 0      # the original never ran
    assert pipeline.models["shape_slat_flow_model_512"].original.calls == 0
    assert acc.fallbacks() == []
    assert "whole loops in the engine 1" in acc.report()


def _tiny():
    from conftest import TINY
    return TINY


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
    import copy
    config = copy.deepcopy(tiny_config)
    config["args"]["in_channels"] = 40
    state = dict(tiny_state_dict)
    rng = np.random.default_rng(5)
    extra = (0.02 * rng.standard_normal((128, 8))).astype(np.float32)
    state["input_layer.weight"] = np.concatenate([state["input_layer.weight"], extra], axis=1)
    original = OriginalModule(config, state)
    p = Pipeline(original)
    p.models = {"tex_slat_flow_model_512": original}
    acc = t2.accelerate(p, device="cpu", cache_dir=cache_dir)
    model = p.models["tex_slat_flow_model_512"]
    noise, cond = request((26, 31), 15)
    shape_slat = SparseTensor(rng.standard_normal((57, 8)).astype(np.float32), noise.coords)
    out = p.tex_slat_sampler.sample(model, noise, cond, np.zeros_like(cond), concat_cond=shape_slat,
                                    **PARAMS)
    engine = sparse3d.Engine.from_state_dict(config, state, device="cpu", cache_dir=cache_dir)
    want = engine.sample(noise.coords, cond, noise=noise.feats, concat_cond=shape_slat.feats,
                         sampler=sparse3d.SamplerSettings(steps=4))
    np.testing.assert_array_equal(out.samples.feats, want)
    v = model(noise, np.full(2, 1000.0, np.float32), cond, concat_cond=shape_slat)
    np.testing.assert_array_equal(
        v.feats, engine.forward(noise.feats, 1000.0, cond, shape_slat.feats, coords=noise.coords))
    assert original.calls == 0 and acc.fallbacks() == []
