"""Numbers and arrays given to the Python API are taken as they are or refused with one
s3d.Error naming the argument, never changed on the way in: steps=2.7 is not 2 steps,
steps="3" is not 3, a seed of 1.5 is not 1, a count past the C++ type's range is not a
std::bad_cast, a bool is not a count, fits() of a negative count is not "fits"; integer
scalars of NumPy are integers. Zero-size arrays are named as empty (not as non-contiguous),
and non-finite values in the request's numeric inputs are refused by name."""
import math
import re

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY, DENSE_C, DENSE_R, dense_request, make_request

QUICK = dict(steps=2, guidance_interval=(0.0, 1.0))


def _request():
    return make_request([40], 1)


# ---- integers and real numbers -------------------------------------------------------------

@pytest.mark.parametrize("steps, message", [
    (2.7, "sampler: steps must be an integer, got 2.7 (float)"),
    (2.0, "sampler: steps must be an integer, got 2.0 (float)"),
    ("3", "sampler: steps must be an integer, got '3' (str)"),
    (True, "sampler: steps must be an integer, got True (bool)"),
    (2**40, "sampler: steps must be an integer in [1, 2147483647], got 1099511627776"),
    (0, "sampler: steps must be an integer in [1, 2147483647], got 0"),
])
def test_steps_must_be_an_integer_in_range(engine, steps, message):
    coords, cond = _request()
    for sampler in (s3d.SamplerSettings(steps=steps), {"steps": steps}):
        with pytest.raises(s3d.Error) as e:
            engine.sample(coords, cond, seed=1, sampler=sampler, progress=False)
        assert str(e.value) == message
    with pytest.raises(s3d.Error, match=re.escape(message)):
        s3d.timesteps({"steps": steps})
    assert engine.counters()["requests"] == 0   # nothing ran


def test_numpy_integers_are_integers(engine):
    coords, cond = _request()
    want = engine.sample(coords, cond, seed=7, sampler=dict(QUICK), progress=False)
    got = engine.sample(coords, cond, seed=np.uint64(7),
                        sampler=dict(QUICK, steps=np.int64(2)), progress=False)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(s3d.draw_noise(np.int32(3), np.int64(4), 5),
                                  s3d.draw_noise(3, 4, 5))
    assert engine.fits(np.int64(40), np.int32(1), np.int16(9)) == ""
    # Floats of NumPy are real numbers.
    assert s3d.timesteps({"steps": 2, "rescale_t": np.float32(3.0)}) == \
        s3d.timesteps({"steps": 2, "rescale_t": 3.0})


@pytest.mark.parametrize("seed, message", [
    (1.5, "sample: seed must be an integer, got 1.5 (float)"),
    ("7", "sample: seed must be an integer, got '7' (str)"),
    (False, "sample: seed must be an integer, got False (bool)"),
    (-1, "sample: seed must be an integer in [0, 18446744073709551615], got -1"),
    (2**64, "sample: seed must be an integer in [0, 18446744073709551615], got 18446744073709551616"),
])
def test_a_seed_must_be_an_unsigned_64_bit_integer(engine, seed, message):
    coords, cond = _request()
    with pytest.raises(s3d.Error) as e:
        engine.sample(coords, cond, seed=seed, sampler=dict(QUICK), progress=False)
    assert str(e.value) == message


@pytest.mark.parametrize("field, value, message", [
    ("rescale_t", "3", "sampler: rescale_t must be a real number, got '3' (str)"),
    ("guidance", math.inf, "sampler: guidance must be finite, got inf"),
    ("guidance_rescale", math.nan, "sampler: guidance_rescale must be finite, got nan"),
    ("sigma_min", None, "sampler: sigma_min must be a real number, got None (NoneType)"),
    ("guidance_interval", (0.5,), "sampler: guidance_interval must be (lo, hi), got (0.5,)"),
    ("guidance_interval", (0.5, "1"), "sampler: guidance_interval[1] must be a real number, "
                                      "got '1' (str)"),
])
def test_real_settings_must_be_finite_numbers(engine, field, value, message):
    coords, cond = _request()
    with pytest.raises(s3d.Error) as e:
        engine.sample(coords, cond, seed=1, sampler=dict(QUICK, **{field: value}),
                      progress=False)
    assert str(e.value) == message


def test_the_native_settings_name_the_setting_not_a_bad_cast():
    with pytest.raises(s3d.Error, match=r"^sampler setting 'steps' must be an integer in "
                                        r"\[-2147483648, 2147483647\], got 1099511627776$"):
        s3d._native.timesteps({"steps": 2**40})
    with pytest.raises(s3d.Error, match=r"^sampler setting 'steps' must be an integer .*, got 2\.7$"):
        s3d._native.timesteps({"steps": 2.7})
    with pytest.raises(s3d.Error, match=r"^sampler setting 'rescale_t' must be a real number, got '3'$"):
        s3d._native.timesteps({"rescale_t": "3"})


@pytest.mark.parametrize("name", s3d.SAMPLER_PRESETS)
def test_the_presets_are_the_engines(name):
    """SamplerSettings' presets are read from the engine (SamplerSettings::preset), so a preset
    the C++ side changes is the one Python passes; the fields' defaults are "released"."""
    from sparse3d_engine import _native
    assert getattr(s3d.SamplerSettings, name)()._native() == _native.sampler_preset(name)
    assert s3d.SamplerSettings() == s3d.SamplerSettings.released()


def test_fits_refuses_counts_that_describe_no_request(engine):
    for args, message in [((-1, 1, 37), "fits: tokens must be an integer in [1, "),
                          ((40, 0, 37), "fits: batch must be an integer in [1, "),
                          ((40, 1, 0), "fits: cond_tokens must be an integer in [1, "),
                          ((40.5, 1, 37), "fits: tokens must be an integer, got 40.5"),
                          ((40, 1, "37"), "fits: cond_tokens must be an integer, got '37'")]:
        with pytest.raises(s3d.Error) as e:
            engine.fits(*args)
        assert str(e.value).startswith(message), str(e.value)
    # The engine itself (the C++ API) refuses them too: an argument error, not an answer.
    for args, message in [((-1, 1, 37), "fits: tokens must be >= 1, got -1"),
                          ((40, 0, 37), "fits: batch must be >= 1, got 0"),
                          ((40, 1, 0), "fits: cond_tokens must be >= 1, got 0")]:
        with pytest.raises(s3d.Error) as e:
            engine._e.fits(*args)
        assert str(e.value) == message
    assert engine.fits(40, 1, 37) == ""


def test_warm_up_draw_noise_and_forward_take_numbers_as_they_are(engine):
    coords, cond = _request()
    with pytest.raises(s3d.Error, match=r"^warm_up: tokens must be an integer, got 40\.0"):
        engine.warm_up([40.0], 9)
    with pytest.raises(s3d.Error, match=r"^warm_up: cond_tokens must be an integer, got 9\.5"):
        engine.warm_up([40], 9.5)
    with pytest.raises(s3d.Error, match=r"^warm_up: tokens must be a sequence"):
        engine.warm_up(40, 9)
    with pytest.raises(s3d.Error, match=r"^draw_noise: seed must be an integer, got 1\.5"):
        s3d.draw_noise(1.5, 2, 2)
    with pytest.raises(s3d.Error, match=r"^draw_noise: rows must be an integer, got '3'"):
        s3d.draw_noise(1, "3", 2)
    with pytest.raises(s3d.Error, match=r"^draw_noise: cols must be an integer in \[0, "):
        s3d.draw_noise(1, 3, -2)
    noise = s3d.draw_noise(2, 40, 32)
    with pytest.raises(s3d.Error, match=r"^forward: t must be a real number, got '500'"):
        engine.forward(noise, "500", cond, coords=coords)
    with pytest.raises(s3d.Error, match=r"^forward: t must be a real number, got True"):
        engine.forward(noise, True, cond, coords=coords)
    # A NumPy scalar is one number for every asset, as a float is.
    np.testing.assert_array_equal(engine.forward(noise, np.float32(500.0), cond, coords=coords),
                                  engine.forward(noise, 500.0, cond, coords=coords))
    with pytest.raises(s3d.Error, match=r"^sample: keep_first_forward must be True or False"):
        engine.sample(coords, cond, seed=1, sampler=dict(QUICK), keep_first_forward=1,
                      progress=False)
    with pytest.raises(s3d.Error, match=r"^make_synthetic_checkpoint: seed must be an integer"):
        s3d.make_synthetic_checkpoint("/nonexistent/x", seed=0.5)
    assert engine.counters()["requests"] == 2   # the two forwards above, nothing else


@pytest.mark.parametrize("option, value, message", [
    ("device_index", 0.5, "device_index must be an integer, got 0.5 (float)"),
    ("device_index", -1, "device_index must be an integer in [0, 2147483647], got -1"),
    ("max_device_memory_gib", "1", "max_device_memory_gib must be a real number, got '1' (str)"),
    ("max_device_memory_gib", math.nan, "max_device_memory_gib must be finite, got nan"),
    ("persist_qualification", 1, "persist_qualification must be True or False, got 1 (int)"),
    ("qualify_m", [64.0], "qualify_m must be an integer, got 64.0 (float)"),
    ("qualify_m", 64, "qualify_m must be a sequence of integers, got 64"),
    ("cache_dir", None, "cache_dir must be a str or an os.PathLike, got None (NoneType)"),
    ("log", "yes", "log must be a callable or None, got str"),
    ("devices", 1, "devices must be a sequence of CUDA device ordinals, got 1"),
    ("devices", [0, 1.5], "devices must be an integer, got 1.5 (float)"),
    ("devices", [-1], "devices must be an integer in [0, 2147483647], got -1"),
    ("devices", [0, 1], "devices: splitting a request over several devices needs the GPU "
                        "backend (this engine runs on the CPU)"),
    ("devices", [0, 0], "devices: device 0 is listed twice"),
    ("parallel_min_tokens", 0, "parallel_min_tokens must be an integer in [1, "
                               "9223372036854775807], got 0"),
])
def test_engine_options_are_checked(cache_dir, tiny_config, tiny_state_dict, option, value,
                                    message):
    options = {"device": "cpu", "cache_dir": cache_dir, option: value}
    with pytest.raises(s3d.Error) as e:
        s3d.Engine(TINY, **options)
    assert str(e.value) == message
    with pytest.raises(s3d.Error) as e:
        s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, **options)
    assert str(e.value) == message


def test_one_device_is_said_in_the_request_stats(cache_dir):
    e = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, devices=[0])
    coords, cond = make_request([40], 1)
    e.sample(coords, cond, seed=1, sampler=dict(QUICK), progress=False)
    assert e.last_request["stats"]["devices"] == 1
    assert e.last_request["stats"]["devices_reason"] == "one device"


def test_numpy_options_are_taken(cache_dir):
    e = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, device_index=np.int64(0),
                   max_device_memory_gib=np.float64(0.0), persist_qualification=np.bool_(False),
                   qualify_m=np.array([64, 128]))
    assert e.device == "cpu"


# ---- zero-size arrays ---------------------------------------------------------------------

def test_a_zero_size_array_is_named_as_empty(engine):
    coords, cond = _request()
    cases = [
        (dict(coords=np.zeros((0, 4), np.int32), cond=cond, seed=1), "coords", "[0, 4]"),
        (dict(coords=coords, cond=np.zeros((1, 0, 64), np.float32), seed=1), "cond", "[1, 0, 64]"),
        (dict(coords=coords, cond=cond, noise=np.zeros((0, 32), np.float32)), "noise", "[0, 32]"),
        (dict(coords=coords, cond=cond, noise=np.zeros((40, 0), np.float32)), "noise", "[40, 0]"),
        (dict(coords=coords, cond=cond, seed=1, out=np.zeros((0, 32), np.float32)), "out", "[0, 32]"),
    ]
    for kwargs, name, shape in cases:
        with pytest.raises(s3d.Error) as e:
            engine.sample(**kwargs, sampler=dict(QUICK), progress=False)
        assert str(e.value) == f"{name}: empty (shape {shape}, zero elements); pass an array " \
                               f"with data", str(e.value)
    noise = s3d.draw_noise(2, 40, 32)
    with pytest.raises(s3d.Error, match=r"^t: empty \(shape \[0\], zero elements\)"):
        engine.forward(noise, np.zeros((0,), np.float32), cond, coords=coords)
    with pytest.raises(s3d.Error, match=r"^x: empty \(shape \[0, 32\], zero elements\)"):
        engine.forward(np.zeros((0, 32), np.float32), 500.0, cond, coords=coords)
    assert engine.counters()["requests"] == 0


# ---- non-finite values in the request's numeric inputs --------------------------------------

def _names_non_finite(message, name):
    """The engine's refusal names the input and says what is wrong with its values."""
    return re.search(rf"\b{name}\b", message) is not None and \
        re.search(r"(?i)non-finite|nan|inf", message) is not None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_noise_is_refused(engine, bad):
    coords, cond = _request()
    noise = s3d.draw_noise(2, 40, 32).copy()
    noise[7, 3] = bad
    with pytest.raises(s3d.Error) as e:
        engine.sample(coords, cond, noise=noise, sampler=dict(QUICK), progress=False)
    assert _names_non_finite(str(e.value), "noise"), str(e.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_dense_volume_is_refused(dense_engine, bad):
    noise, cond = dense_request(1, 3)
    noise[0, 2, 1, 1, 1] = bad
    with pytest.raises(s3d.Error) as e:
        dense_engine.sample(cond=cond, noise=noise, sampler=dict(QUICK), progress=False)
    assert _names_non_finite(str(e.value), "noise"), str(e.value)
    t = np.full(1, 500.0, np.float32)
    with pytest.raises(s3d.Error) as e:
        dense_engine.forward(noise, t, cond)
    assert _names_non_finite(str(e.value), "x"), str(e.value)
    assert noise.shape == (1, DENSE_C, DENSE_R, DENSE_R, DENSE_R)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_forward_x_and_t_are_refused(engine, bad):
    coords, cond = _request()
    x = s3d.draw_noise(2, 40, 32).copy()
    x[0, 0] = bad
    with pytest.raises(s3d.Error) as e:
        engine.forward(x, 500.0, cond, coords=coords)
    assert _names_non_finite(str(e.value), "x"), str(e.value)
    good = s3d.draw_noise(2, 40, 32)
    with pytest.raises(s3d.Error) as e:
        engine.forward(good, np.array([bad], np.float32), cond, coords=coords)
    assert _names_non_finite(str(e.value), "t"), str(e.value)
    # One number for every asset: refused before it becomes an array.
    with pytest.raises(s3d.Error, match=r"^forward: t must be finite"):
        engine.forward(good, float(bad), cond, coords=coords)


# ---- arguments of the wrong kind: one line naming them, never nanobind's signature list --------

def _one_line(e):
    """The refusal is one line: not nanobind's "incompatible function arguments" listing."""
    text = str(e.value)
    assert "\n" not in text and "incompatible function arguments" not in text, text
    return text


def test_from_state_dict_refuses_a_config_or_state_dict_of_the_wrong_kind(tiny_config,
                                                                          tiny_state_dict,
                                                                          cache_dir):
    options = dict(device="cpu", cache_dir=cache_dir)
    for config, state_dict, message in [
        ([], {}, "from_state_dict: config must be a dict or JSON text (a str), got list"),
        (None, {}, "from_state_dict: config must be a dict or JSON text (a str), got NoneType"),
        ({"name": object()}, {}, "from_state_dict: config is not JSON-serializable"),
        (tiny_config, [1, 2], "from_state_dict: state_dict must be a mapping of names to "
                              "arrays (a dict, a module's state_dict()), got list"),
        (tiny_config, {"input_layer.weight": [1.0]},
         "from_state_dict: state_dict['input_layer.weight'] must be an array (a torch, NumPy, "
         "CuPy or JAX array), got list"),
        (tiny_config, {3: np.zeros(3, np.float32)},
         "from_state_dict: state_dict's names must be str, got 3 (int)"),
    ]:
        with pytest.raises(s3d.Error) as e:
            s3d.Engine.from_state_dict(config, state_dict, **options)
        assert _one_line(e).startswith(message), str(e.value)
    # A values view of the right kind still loads.
    assert s3d.Engine.from_state_dict(tiny_config, dict(tiny_state_dict), **options).device == "cpu"


def test_sample_refuses_arrays_of_the_wrong_kind_by_name(engine):
    coords, cond = _request()
    read_only = np.empty((40, 32), np.float32)
    read_only.flags.writeable = False
    cases = [
        (dict(coords=coords.tolist(), cond=cond, seed=1), "sample: coords must be an array (a "
         "torch, NumPy, CuPy or JAX array), got list"),
        (dict(coords=coords, cond=cond.tolist(), seed=1), "sample: cond must be an array"),
        (dict(coords=coords, cond={"feats": cond}, seed=1), "sample: cond must be an array"),
        (dict(coords=coords, cond=cond, noise=3.0), "sample: noise must be an array"),
        (dict(coords=coords, cond=cond, seed=1, concat_cond=[0.0]),
         "sample: concat_cond must be an array"),
        (dict(coords=coords, cond=cond, seed=1, out=read_only),
         "sample: out is read-only (the engine writes the result into it); pass a writable "
         "array"),
        (dict(coords=coords, cond=cond, seed=1, out=[0.0]), "sample: out must be an array"),
        (dict(coords=coords, cond=cond, seed=1, path=5), "sample: path must be a str, got 5"),
        (dict(coords=coords, cond=cond, seed=1, callback=3),
         "sample: callback must be a callable or None, got int"),
        (dict(coords=coords, cond=cond, seed=1, stream=-1),
         "stream must be an integer in [0, 18446744073709551615], got -1"),
        (dict(coords=coords, cond=cond, seed=1, stream=True),
         "stream must be an int handle, a torch.cuda.Stream or a cupy.cuda.Stream, got bool"),
    ]
    for kwargs, message in cases:
        with pytest.raises(s3d.Error) as e:
            engine.sample(**kwargs, sampler=dict(QUICK), progress=False)
        assert _one_line(e).startswith(message), str(e.value)
    assert engine.counters()["requests"] == 0


def test_forward_refuses_arrays_of_the_wrong_kind_by_name(engine):
    coords, cond = _request()
    noise = s3d.draw_noise(2, 40, 32)
    read_only = noise.copy()
    read_only.flags.writeable = False
    from conftest import SparseTensor
    cases = [
        (({"feats": noise}, 500.0, cond), dict(coords=coords),
         "forward: x must be an array (a torch, NumPy, CuPy or JAX array), got dict"),
        ((SparseTensor(noise.tolist(), coords), 500.0, cond), {},
         "forward: x.feats must be an array"),
        ((noise, 500.0, cond.tolist()), dict(coords=coords), "forward: cond must be an array"),
        ((noise, 500.0, cond), dict(coords=coords.tolist()), "forward: coords must be an array"),
        ((noise, 500.0, cond), dict(coords=coords, path=["fast"]), "forward: path must be a str"),
        ((noise, 500.0, cond), dict(coords=coords, out=read_only), "forward: out is read-only"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(s3d.Error) as e:
            engine.forward(*args, **kwargs)
        assert _one_line(e).startswith(message), str(e.value)
    with pytest.raises(s3d.Error) as e:
        engine.fits(40, 1, 9, path=1)
    assert _one_line(e) == "fits: path must be a str, got 1 (int)"
    assert engine.counters()["requests"] == 0


def test_the_native_module_names_an_argument_of_the_wrong_kind(engine):
    """What a direct caller of the native module sees: one line naming the argument."""
    coords, cond = _request()
    read_only = np.empty((40, 32), np.float32)
    read_only.flags.writeable = False
    native = engine._e
    for call, message in [
        (lambda: native.sample(coords.tolist(), cond, 1), "coords: not an array (a DLPack "
         "producer such as a torch, NumPy, CuPy or JAX array), got list"),
        (lambda: native.sample(coords, None, 1), "cond: required, got None"),
        (lambda: native.sample(coords, cond, 1, out=read_only), "out: read-only; the engine "
         "writes the result into it: pass a writable array"),
        (lambda: native.forward({}, cond, coords, cond, 1), "x: not an array"),
        (lambda: native.forward(read_only, 5, coords, cond, 1), "t: not an array"),
        (lambda: s3d._native.Engine.from_tensors("{}", {}), "tensors: not a list of (name, "
         "array) pairs, got dict"),
        (lambda: s3d._native.Engine.from_tensors("{}", [1]), "tensors: item 0 is not a "
         "(name, array) pair, got int"),
        (lambda: s3d._native.Engine.from_tensors("{}", [("w", [1.0])]), "w: not an array"),
    ]:
        with pytest.raises(s3d.Error) as e:
            call()
        assert _one_line(e).startswith(message), str(e.value)


# ---- draw_noise: what it cannot draw is refused at once ----------------------------------------

@pytest.mark.parametrize("args, message", [
    ((1, 2**31, 2), "draw_noise: rows x cols (2147483648 x 2) is more than 2147483647 elements "
                    "(the most it draws at once)"),
    ((1, 2**40, 2**40), "draw_noise: rows x cols (1099511627776 x 1099511627776) is more than "
                        "2147483647 elements"),
    ((1, 4, 8, 2**64 - 1), "draw_noise: offset 18446744073709551615 + 32 elements (rows x "
                           "cols) ends past element 2^63 of the seed's stream"),
    ((1, 4, 8, 2**63 - 31), "draw_noise: offset 9223372036854775777 + 32 elements"),
])
def test_draw_noise_refuses_what_it_cannot_draw_at_once(args, message):
    import time
    t0 = time.perf_counter()
    with pytest.raises(s3d.Error) as e:
        s3d.draw_noise(*args)
    assert time.perf_counter() - t0 < 0.5
    assert _one_line(e).startswith(message), str(e.value)


def test_draw_noise_up_to_the_end_of_the_stream_draws():
    last = s3d.draw_noise(1, 4, 8, 2**63 - 32)
    longer = s3d.draw_noise(1, 5, 8, 2**63 - 40)
    np.testing.assert_array_equal(longer[1:], last)
    assert np.isfinite(last).all()


def test_an_empty_checkpoint_path_is_named(cache_dir):
    with pytest.raises(s3d.Error) as e:
        s3d.Engine("", device="cpu", cache_dir=cache_dir)
    assert str(e.value) == "checkpoint must be the path of a NAME.json, got '' (an empty path)"
