"""The Python API on the CPU backend over NumPy arrays (DLPack): requests, results, callbacks,
counters, errors, in-memory checkpoints, threads."""
import threading

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY, SparseTensor, make_request

QUICK = s3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0), guidance_rescale=0.5)


def test_module_facts():
    assert s3d.__version__.count(".") == 2
    names = [p["name"] for p in s3d.paths()]
    assert names[0] == "pure_eager" and s3d.default_path() in names
    flags = {f["name"]: f for f in s3d.flags()}
    assert flags["modulated_layernorm"]["contract"] == "bitwise"
    assert flags["batched_cfg"]["contract"].startswith("tolerance")
    ts = s3d.timesteps("released")
    assert len(ts) == 13 and ts[0] == 1.0 and ts[-1] == 0.0


def test_engine_loads_on_the_cpu(engine):
    assert engine.device == "cpu"
    assert engine.plan == "fast-cuda_graphs"
    m = engine.model
    assert (m["family"], m["out_channels"], m["cond_channels"]) == ("SLatFlowModel", 32, 64)
    assert len(m["content_hash"]) == 16
    assert "tiny.json" in repr(engine)
    fp = engine.fingerprint()
    assert isinstance(fp, dict) and fp
    # Booleans as booleans (has_gpu was the string 'false', which is truthy).
    assert isinstance(fp["has_gpu"], bool)


def test_a_checkpoint_path_naming_the_weights_file_says_so(cache_dir):
    weights = TINY[:-len(".json")] + ".safetensors"
    with pytest.raises(s3d.Error, match=r"^checkpoint .*tiny\.safetensors is the weights file: "
                                        r"give its config, .*tiny\.json \(NAME\.json, with "
                                        r"NAME\.safetensors beside it\)$"):
        s3d.Engine(weights, device="cpu", cache_dir=cache_dir)


def test_seed_and_noise_give_the_same_bits(engine):
    coords, cond = make_request([61, 40], 1)
    by_seed = engine.sample(coords, cond, seed=7, sampler=QUICK)
    assert isinstance(by_seed, np.ndarray) and by_seed.shape == (101, 32)
    assert by_seed.dtype == np.float32 and np.isfinite(by_seed).all()
    noise = s3d.draw_noise(7, 101, 32)
    # The caller's buffer, poisoned: every element must be written.
    out = np.full((101, 32), np.nan, dtype=np.float32)
    given = engine.sample(coords, cond, noise=noise, sampler=QUICK, out=out)
    assert given is out
    np.testing.assert_array_equal(by_seed, out)
    stats = engine.last_request["stats"]
    assert stats["tokens"] == 101 and stats["loop_seconds"] > 0
    assert stats["wall_seconds"] >= stats["request_seconds"]
    # The second request at this token count: its qualification was done by the first.
    assert stats["null_context_seconds"] == 0 and isinstance(stats["first_use"], dict)
    assert [s["index"] for s in engine.last_request["steps"]] == [0, 1, 2]


def test_a_different_seed_gives_a_different_latent(engine):
    coords, cond = make_request([50], 2)
    a = engine.sample(coords, cond, seed=1, sampler=QUICK)
    b = engine.sample(coords, cond, seed=2, sampler=QUICK)
    assert not np.array_equal(a, b)


def test_forward_is_the_first_step_of_sample(engine):
    coords, cond = make_request([47], 3)
    noise = s3d.draw_noise(5, 47, 32)
    engine.sample(coords, cond, noise=noise, sampler=QUICK, keep_first_forward=True)
    v_cond = engine.last_request["first_v_cond"]
    x = SparseTensor(noise, coords)
    v = engine(x, np.array([1000.0], dtype=np.float32), cond)
    assert isinstance(v, SparseTensor) and v.coords is coords
    np.testing.assert_array_equal(v.feats, v_cond)
    # The same call on plain arrays, t as a number.
    np.testing.assert_array_equal(engine.forward(noise, 1000.0, cond, coords=coords), v_cond)
    # The unconditional branch is a zero condition.
    v_uncond = engine.forward(noise, 1000.0, np.zeros_like(cond), coords=coords)
    np.testing.assert_array_equal(v_uncond, engine.last_request["first_v_uncond"])


def test_callback_sees_every_step(engine):
    coords, cond = make_request([33], 4)
    seen = []

    def on_step(step, t, latent):
        seen.append((step, t, np.array(latent)))  # a copy: the view is valid in the call only

    final = engine.sample(coords, cond, seed=3, sampler=QUICK, callback=on_step)
    ts = s3d.timesteps(QUICK)
    assert [s for s, _, _ in seen] == [0, 1, 2]
    assert [t for _, t, _ in seen] == pytest.approx(ts[:3])
    np.testing.assert_array_equal(seen[-1][2], final)
    assert not np.array_equal(seen[0][2], seen[1][2])


def test_a_callback_error_ends_the_request_with_it(engine):
    coords, cond = make_request([20], 5)
    calls = []

    def on_step(step, t, latent):
        calls.append(step)
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt, match="stop"):
        engine.sample(coords, cond, seed=1, sampler=QUICK, callback=on_step)
    assert calls == [0]  # no further callbacks after the first error
    # The engine still serves requests.
    assert engine.sample(coords, cond, seed=1, sampler=QUICK).shape == (20, 32)


def test_counters_and_qualification_are_plain_data(engine):
    coords, cond = make_request([30], 6)
    engine.sample(coords, cond, seed=1, sampler=QUICK)
    c = engine.counters()
    assert c["requests"] == 1
    assert isinstance(c["fallbacks"], list)
    for f in c["fallbacks"]:
        assert set(f) == {"optimization", "reason", "count"}
    q = engine.qualification()
    assert q and q[0]["context_tokens"] == 9 and isinstance(q[0]["shapes"], list)
    engine.reset_counters()
    assert engine.counters()["launches"] == 0


@pytest.mark.parametrize("change, message", [
    (lambda c, d: (c.astype(np.int64), d), "coords: dtype int64 is not supported"),
    (lambda c, d: (c, d.astype(np.float64)), "cond: dtype float64 is not supported"),
    (lambda c, d: (np.asfortranarray(np.repeat(c, 1, axis=0)), d), "coords: not contiguous"),
    (lambda c, d: (c[:, :3].copy(), d), "coords"),
    (lambda c, d: (c, d[:, :, :10].copy()), "cond"),
])
def test_bad_inputs_are_one_clear_error(engine, change, message):
    coords, cond = make_request([25], 7)
    coords, cond = change(coords, cond)
    with pytest.raises(s3d.Error, match=message):
        engine.sample(coords, cond, seed=1, sampler=QUICK)


def test_bad_arguments_are_one_clear_error(engine, cache_dir):
    coords, cond = make_request([25], 8)
    with pytest.raises(s3d.Error, match="noise or a seed"):
        engine.sample(coords, cond, sampler=QUICK)
    with pytest.raises(s3d.Error, match="not both"):
        engine.sample(coords, cond, seed=1, noise=s3d.draw_noise(1, 25, 32))
    with pytest.raises(s3d.Error, match="unknown setting"):
        engine.sample(coords, cond, seed=1, sampler={"stepz": 3})
    with pytest.raises(s3d.Error, match="fast_path"):
        engine.sample(coords, cond, seed=1, sampler=QUICK, path="fast_path")
    with pytest.raises(s3d.Error, match="out"):
        engine.sample(coords, cond, seed=1, sampler=QUICK, out=np.zeros((24, 32), np.float32))
    with pytest.raises(s3d.Error, match="no .coords"):
        engine.forward(np.zeros((25, 32), np.float32), 1000.0, cond)
    with pytest.raises(s3d.Error, match="nope.json"):
        s3d.Engine("/nonexistent/nope.json", device="cpu", cache_dir=cache_dir)
    with pytest.raises(s3d.Error, match="device must be"):
        s3d.Engine(TINY, device="tpu", cache_dir=cache_dir)
    # s3d.Error is a RuntimeError, for code that catches those.
    assert issubclass(s3d.Error, RuntimeError)


def test_a_state_dict_in_memory_serves_as_its_file(engine, tiny_config, tiny_state_dict, cache_dir):
    mem = s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, name="tiny (numpy)",
                                          device="cpu", cache_dir=cache_dir)
    assert mem.model["checkpoint"] == "tiny (numpy)"
    assert mem.model["content_hash"] == engine.model["content_hash"]
    coords, cond = make_request([29], 9)
    np.testing.assert_array_equal(mem.sample(coords, cond, seed=4, sampler=QUICK),
                                  engine.sample(coords, cond, seed=4, sampler=QUICK))
    broken = dict(tiny_state_dict)
    name = sorted(broken)[0]
    del broken[name]
    with pytest.raises(s3d.Error, match="missing: " + name.replace(".", r"\.")):
        s3d.Engine.from_state_dict(tiny_config, broken, device="cpu", cache_dir=cache_dir)
    with pytest.raises(s3d.Error, match="unknown option"):
        s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, colour="red")


def test_requests_release_the_gil(engine):
    coords, cond = make_request([200, 150], 10)
    done = threading.Event()
    result = {}

    def run():
        try:
            result["latent"] = engine.sample(coords, cond, seed=1, sampler={"steps": 4})
        finally:
            done.set()

    ticks = 0
    worker = threading.Thread(target=run)
    worker.start()
    while not done.is_set():
        ticks += 1
        done.wait(0.001)
    worker.join()
    assert result["latent"].shape == (350, 32)
    # The request took many milliseconds; this thread ran meanwhile.
    assert ticks > 20


def test_a_weight_format_is_a_keyword_and_the_model_says_which(engine, cache_dir, tiny_config,
                                                              tiny_state_dict):
    scaled = s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, weight_format="row_scaled")
    assert engine.model["weight_format"] == "plain"
    assert scaled.model["weight_format"] == "row_scaled"
    assert scaled.model["content_hash"] != engine.model["content_hash"]
    coords, cond = make_request([37, 21], 5)
    want = engine.sample(coords, cond, seed=3, sampler=QUICK)
    got = scaled.sample(coords, cond, seed=3, sampler=QUICK)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 0 < err < 2e-2
    mem = s3d.Engine.from_state_dict(tiny_config, tiny_state_dict, device="cpu",
                                     cache_dir=cache_dir, weight_format="row_scaled")
    assert mem.model["content_hash"] == scaled.model["content_hash"]
    with pytest.raises(s3d.Error, match=r"unknown weight format 'fp8' \(known: plain, row_scaled"):
        s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, weight_format="fp8")
    with pytest.raises(s3d.Error, match=r"weight_format must be a str"):
        s3d.Engine(TINY, device="cpu", cache_dir=cache_dir, weight_format=None)
