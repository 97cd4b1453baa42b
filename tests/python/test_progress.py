"""Progress bars: none by default; `progress=True`, `set_progress(True)` or SPARSE3D_ENGINE_PROGRESS=1 turn
one on, over the steps, where tqdm is installed. The drop-in's samplers follow TRELLIS.2's
`verbose` and `tqdm_desc` where stderr is a terminal. A stand-in tqdm module records what the
package asks of it (CI has no tqdm). A bar is fed by the engine's progress report (steps the
device has finished, never waiting for it), not by a step callback (which synchronises)."""
import sys
import types

import numpy as np
import pytest

import sparse3d_engine as s3d
import sparse3d_engine.trellis2 as t2
from conftest import SparseTensor, make_request
from test_trellis2 import OriginalModule, Pipeline

QUICK = s3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0))


class _Bar:
    def __init__(self, total=None, desc=None):
        self.total, self.desc, self.n, self.closed = total, desc, 0, False

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    made = []

    def tqdm(*args, **kwargs):
        made.append(_Bar(*args, **kwargs))
        return made[-1]

    stand_in = types.SimpleNamespace(tqdm=tqdm)
    monkeypatch.setitem(sys.modules, "tqdm", stand_in)
    monkeypatch.setitem(sys.modules, "tqdm.auto", stand_in)
    monkeypatch.setattr(s3d._progress, "_progress_default", True)
    return made


class _Stderr:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def _request():
    coords, cond = make_request([30], 4)
    return coords, cond


def test_no_bar_unless_asked_for(engine, bars, monkeypatch):
    coords, cond = _request()
    monkeypatch.setattr(s3d._progress, "_progress_default", s3d._progress._progress_setting(None))
    assert not s3d.progress_enabled()
    engine.sample(coords, cond, seed=2, sampler=QUICK)
    assert bars == []
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)
    assert [(b.total, b.n, b.closed) for b in bars] == [(3, 3, True)]


def test_the_bar_follows_the_progress_report_not_a_step_callback(engine, bars, monkeypatch):
    coords, cond = _request()
    native = engine._e
    asked = []

    class Spy:
        def __getattr__(self, name):
            return getattr(native, name)

        def sample(self, *args, **kwargs):
            asked.append((kwargs.get("callback"), kwargs.get("progress")))
            return native.sample(*args, **kwargs)

    monkeypatch.setattr(engine, "_e", Spy())
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)
    assert len(asked) == 1 and asked[0][0] is None and callable(asked[0][1])
    assert [(b.total, b.n, b.closed) for b in bars] == [(3, 3, True)]
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress=False)
    assert asked[1] == (None, None)


def test_the_environment_variable_reads_as_documented():
    for text in ("1", "true", " ON ", "yes"):
        assert s3d._progress._progress_setting(text) is True
    for text in ("0", "false", "Off", "no"):
        assert s3d._progress._progress_setting(text) is False
    for text in (None, "", "maybe"):
        assert s3d._progress._progress_setting(text) is None


def test_a_bar_per_sample_when_turned_on(engine, bars):
    coords, cond = _request()
    seen = []
    latent = engine.sample(coords, cond, seed=2, sampler=QUICK,
                           callback=lambda step, t, x: seen.append((step, x.shape)))
    assert [(b.total, b.desc, b.n, b.closed) for b in bars] == [(3, "Sampling", 3, True)]
    assert seen == [(k, (30, 32)) for k in range(3)]   # the caller's callback still runs
    # The bar changes nothing in the result.
    assert np.array_equal(latent, engine.sample(coords, cond, seed=2, sampler=QUICK,
                                                progress=False))
    assert len(bars) == 1
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress="Shape SLat")
    assert (bars[-1].desc, bars[-1].n) == ("Shape SLat", 3)


def test_set_progress_turns_the_default_off(engine, bars):
    coords, cond = _request()
    s3d.set_progress(False)
    try:
        assert not s3d.progress_enabled()
        engine.sample(coords, cond, seed=2, sampler=QUICK)
        assert bars == []
        engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)  # a call's wins
        assert len(bars) == 1
    finally:
        s3d.set_progress(True)   # the fixture puts the process default back


def test_the_bar_is_closed_when_the_request_fails(engine, bars):
    coords, cond = _request()
    with pytest.raises(s3d.Error):
        engine.sample(coords, cond[:, :, :5].copy(), seed=2, sampler=QUICK)
    assert len(bars) == 1 and bars[0].closed


def test_without_tqdm_nothing_and_no_error(engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)   # import tqdm raises ImportError
    monkeypatch.delitem(sys.modules, "tqdm.auto", raising=False)
    monkeypatch.setattr(s3d._progress, "_progress_default", True)
    coords, cond = _request()
    engine.sample(coords, cond, seed=2, sampler=QUICK)
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)


def test_a_tqdm_stand_in_that_is_no_bar_is_ignored(engine, monkeypatch):
    # Some scripts put a pass-through tqdm(iterable) in sys.modules.
    stand_in = types.SimpleNamespace(tqdm=lambda iterable, *a, **k: iterable)
    monkeypatch.setitem(sys.modules, "tqdm", stand_in)
    monkeypatch.setitem(sys.modules, "tqdm.auto", stand_in)
    coords, cond = _request()
    engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)


def test_the_drop_in_sampler_follows_verbose_and_tqdm_desc(bars, cache_dir, tiny_config,
                                                         tiny_state_dict, monkeypatch):
    pipeline = Pipeline(OriginalModule(tiny_config, tiny_state_dict))
    acc = t2.accelerate(pipeline, cache_dir=cache_dir)
    model = pipeline.models["shape_slat_flow_model_512"]
    coords, cond = _request()
    noise = SparseTensor(s3d.draw_noise(3, 30, 32), coords)
    params = dict(steps=2, rescale_t=3.0, guidance_strength=7.5, guidance_interval=(0.0, 1.0))
    sampler = pipeline.shape_slat_sampler
    zero = np.zeros_like(cond)
    sampler.sample(model, noise, cond, zero, **params)     # TRELLIS.2's default: verbose=True
    sampler.sample(model, noise, cond, zero, **params, tqdm_desc="Shape: 512")
    sampler.sample(model, noise, cond, zero, **params, verbose=False)
    assert [(b.total, b.desc, b.n, b.closed) for b in bars] == [
        (2, "Sampling", 2, True), (2, "Shape: 512", 2, True)]
    assert acc.fallbacks() == [] and pipeline.shape_slat_sampler.original.loops == 0
    s3d.set_progress(False)
    try:
        sampler.sample(model, noise, cond, zero, **params)
        assert len(bars) == 2
    finally:
        s3d.set_progress(True)
    # Not set: a bar where stderr is a terminal, none where it is not (a log file, a pipe).
    monkeypatch.setattr(s3d._progress, "_progress_default", None)
    monkeypatch.setattr(sys, "stderr", _Stderr(tty=False))
    sampler.sample(model, noise, cond, zero, **params)
    assert len(bars) == 2
    monkeypatch.setattr(sys, "stderr", _Stderr(tty=True))
    sampler.sample(model, noise, cond, zero, **params)
    assert len(bars) == 3


def test_an_error_in_the_bar_ends_the_request_with_that_error(engine, monkeypatch):
    class Broken(_Bar):
        def update(self, n=1):
            raise ValueError("the bar broke")

    stand_in = types.SimpleNamespace(tqdm=lambda *a, **k: Broken(*a, **k))
    monkeypatch.setitem(sys.modules, "tqdm", stand_in)
    monkeypatch.setitem(sys.modules, "tqdm.auto", stand_in)
    coords, cond = _request()
    with pytest.raises(ValueError, match="the bar broke"):
        engine.sample(coords, cond, seed=2, sampler=QUICK, progress=True)
    # The engine serves the next request as if nothing happened.
    got = engine.sample(coords, cond, seed=2, sampler=QUICK, progress=False)
    assert np.array_equal(got, engine.sample(coords, cond, seed=2, sampler=QUICK, progress=False))
