"""The dense family (TRELLIS.2's SparseStructureFlowModel) through the Python API on the CPU
backend: volume mode (coords=None, latents [B, 8, R, R, R]) against token mode (the full grid
in raster order), the sparse-structure sampler preset, and the errors that tell the two
layouts and the two families apart."""
import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import (DENSE_C, DENSE_R, grid_coords, make_request, dense_request, to_tokens,
                      to_volume)

R, C = DENSE_R, DENSE_C
# CFG on every step and guidance rescale on: the sampler's whole arithmetic (the dense
# family's unbiased std included) runs in each request.
QUICK = s3d.SamplerSettings(steps=3, rescale_t=5.0, guidance_interval=(0.0, 1.0),
                                 guidance_rescale=0.7)


def test_the_dense_engine_describes_itself(dense_engine):
    m = dense_engine.model
    assert m["family"] == "SparseStructureFlowModel" == s3d.DENSE
    assert dense_engine.family == s3d.DENSE
    # What differs between families, from the engine's registry.
    assert m["layout"] == "grid" and m["sampler_preset"] == "released_sparse_structure"
    assert dense_engine.sampler_preset == "released_sparse_structure"
    families = s3d.model_families()
    assert families[s3d.DENSE] == {"name": s3d.DENSE, "layout": "grid",
                                   "sampler_preset": "released_sparse_structure",
                                   "reads_rope_freq": False}
    assert families[s3d.SLAT] == {"name": s3d.SLAT, "layout": "tokens",
                                  "sampler_preset": "released", "reads_rope_freq": True}
    assert (m["resolution"], m["in_channels"], m["out_channels"]) == (R, C, C)
    assert "tiny dense" in repr(dense_engine)


def test_volume_sample_is_token_sample_transposed(dense_engine):
    noise, cond = dense_request(2, 1)
    vol = dense_engine.sample(cond=cond, noise=noise, sampler=QUICK)
    assert isinstance(vol, np.ndarray) and vol.shape == (2, C, R, R, R)
    assert vol.dtype == np.float32 and np.isfinite(vol).all()
    assert not np.array_equal(vol, noise)
    tok = dense_engine.sample(grid_coords(2), cond, noise=to_tokens(noise), sampler=QUICK)
    assert tok.shape == (2 * R ** 3, C)
    np.testing.assert_array_equal(vol, to_volume(tok, 2))
    # coords=None given positionally, and a caller's (poisoned) volume buffer.
    out = np.full((2, C, R, R, R), np.nan, dtype=np.float32)
    got = dense_engine.sample(None, cond, noise=noise, sampler=QUICK, out=out)
    assert got is out
    np.testing.assert_array_equal(out, vol)
    stats = dense_engine.last_request["stats"]
    assert stats["tokens"] == 2 * R ** 3


def test_each_asset_is_independent_of_the_batch(dense_engine):
    noise, cond = dense_request(2, 2)
    both = dense_engine.sample(cond=cond, noise=noise, sampler=QUICK)
    second = dense_engine.sample(cond=cond[1:], noise=noise[1:], sampler=QUICK)
    np.testing.assert_allclose(both[1:], second, rtol=0, atol=1e-5)


def test_volume_forward_is_token_forward_transposed(dense_engine):
    noise, cond = dense_request(2, 3)
    t = np.array([1000.0, 600.0], dtype=np.float32)
    v = dense_engine.forward(noise, t, cond)
    assert isinstance(v, np.ndarray) and v.shape == (2, C, R, R, R) and v.dtype == np.float32
    v_tok = dense_engine.forward(to_tokens(noise), t, cond, coords=grid_coords(2))
    assert v_tok.shape == (2 * R ** 3, C)
    np.testing.assert_array_equal(v, to_volume(v_tok, 2))
    # The call form, t as one number for every asset, a caller's buffer.
    out = np.full((2, C, R, R, R), np.nan, dtype=np.float32)
    assert dense_engine(noise, 1000.0, cond, out=out) is out
    np.testing.assert_array_equal(out[0], v[0])
    assert not np.array_equal(out[1], v[1])   # t differs for the second asset


def test_volume_mode_first_forward_and_callbacks(dense_engine):
    noise, cond = dense_request(1, 4)
    seen = []

    def on_step(step, t, latent):
        seen.append((step, np.array(latent)))

    final = dense_engine.sample(cond=cond, noise=noise, sampler=QUICK, callback=on_step,
                                keep_first_forward=True)
    assert [s for s, _ in seen] == [0, 1, 2]
    assert all(lat.shape == (1, C, R, R, R) for _, lat in seen)
    np.testing.assert_array_equal(seen[-1][1], final)
    first = dense_engine.last_request
    assert first["first_v_cond"].shape == (1, C, R, R, R)
    np.testing.assert_array_equal(first["first_v_cond"], dense_engine.forward(noise, 1000.0, cond))
    np.testing.assert_array_equal(first["first_v_uncond"],
                                  dense_engine.forward(noise, 1000.0, np.zeros_like(cond)))


def test_a_seed_in_volume_mode_and_in_token_mode(dense_engine):
    """A seed starts both modes from the same latent: the dense family's stream fills the
    volume [B, C, R, R, R] in row-major order (the order the original fills its noise),
    draw_noise(seed, B C, R^3) reshaped; token mode starts from that volume transposed."""
    _, cond = dense_request(2, 5)
    vol = dense_engine.sample(cond=cond, seed=9, sampler=QUICK)
    tok = dense_engine.sample(grid_coords(2), cond, seed=9, sampler=QUICK)
    np.testing.assert_array_equal(vol, to_volume(tok, 2))
    noise = s3d.draw_noise(9, 2 * C, R ** 3).reshape(2, C, R, R, R)
    np.testing.assert_array_equal(vol, dense_engine.sample(cond=cond, noise=noise, sampler=QUICK))


def test_the_released_sparse_structure_sampler():
    s = s3d.SamplerSettings.released_sparse_structure()
    assert (s.steps, s.rescale_t, s.guidance, s.guidance_interval, s.guidance_rescale,
            s.sigma_min) == (12, 5.0, 7.5, (0.6, 1.0), 0.7, 1e-5)
    assert "released_sparse_structure" in s3d.SAMPLER_PRESETS
    ts = s3d.timesteps("released_sparse_structure")
    want = [1, 0.982142857, 0.961538462, 0.9375, 0.909090909, 0.875, 0.833333333, 0.78125,
            0.714285714, 0.625, 0.5, 0.3125, 0]
    assert ts == pytest.approx(want, abs=1e-8)
    # The shape preset is unchanged.
    assert s3d.timesteps("released")[3] == pytest.approx(3 * 0.75 / (1 + 2 * 0.75))


def test_a_dense_engine_defaults_to_the_sparse_structure_sampler(dense_engine):
    noise, cond = dense_request(1, 6)
    default = dense_engine.sample(cond=cond, noise=noise)
    steps = dense_engine.last_request["steps"]
    assert len(steps) == 12
    assert [s["cfg"] for s in steps] == [True] * 10 + [False] * 2   # 22 forwards
    np.testing.assert_array_equal(
        default, dense_engine.sample(cond=cond, noise=noise, sampler="released_sparse_structure"))
    shape_settings = dense_engine.sample(cond=cond, noise=noise, sampler="released")
    assert not np.array_equal(default, shape_settings)


def test_a_slat_engine_keeps_the_shape_default(engine):
    coords, cond = make_request([30], 7)
    default = engine.sample(coords, cond, seed=3)
    np.testing.assert_array_equal(default, engine.sample(coords, cond, seed=3, sampler="released"))


def test_a_slat_engine_refuses_coords_none(engine):
    coords, cond = make_request([25], 8)
    noise = s3d.draw_noise(1, 25, 32)
    with pytest.raises(s3d.Error, match="coords are required.*SparseStructureFlowModel"):
        engine.sample(cond=cond, noise=noise, sampler=QUICK)
    with pytest.raises(s3d.Error, match="coords are required"):
        engine.sample(None, cond, seed=1)
    with pytest.raises(s3d.Error, match="no .coords"):
        engine.forward(noise, 1000.0, cond)
    # The engine itself refuses empty coords for a Transformer (the binding passes None on).
    with pytest.raises(s3d.Error):
        engine._e.sample(None, cond, 1, noise=noise, sampler=QUICK._native())
    with pytest.raises(s3d.Error):
        engine._e.forward(noise, np.full(1, 1000.0, np.float32), None, cond, 1)


def test_the_noise_of_a_slat_sparse_tensor_brings_its_coords(engine):
    from conftest import SparseTensor
    coords, cond = make_request([22], 9)
    noise = s3d.draw_noise(2, 22, 32)
    np.testing.assert_array_equal(engine.sample(noise=SparseTensor(noise, coords), cond=cond,
                                                sampler=QUICK),
                                  engine.sample(coords, cond, noise=noise, sampler=QUICK))


def _shuffled_grid(batch):
    c = grid_coords(batch)
    return np.ascontiguousarray(c[np.r_[1, 0, 2:len(c)]])


@pytest.mark.parametrize("call, message", [
    # Layout confusions, told apart before the engine runs.
    (lambda e, n, c: e.sample(make_request([40], 1)[0], c, noise=to_tokens(n)[:40]),
     r"full 8\^3 grid of each asset in raster order: \[1024, 4\]"),
    (lambda e, n, c: e.sample(grid_coords(2), c, noise=n), "noise is a volume.*coords=None"),
    (lambda e, n, c: e.sample(cond=c, noise=to_tokens(n)), r"with coords=None \(volume mode\)"),
    (lambda e, n, c: e.forward(n, 1000.0, c, coords=grid_coords(2)), "x is a volume"),
    (lambda e, n, c: e.forward(to_tokens(n), 1000.0, c), r"x has shape \[1024, 8\]"),
    (lambda e, n, c: e.sample(cond=c, noise=n, out=np.zeros((1024, 8), np.float32)),
     "out has shape"),
    (lambda e, n, c: e.sample(noise=n), "cond is required"),
    (lambda e, n, c: e.sample(cond=c, noise=n, sampler="released_ss"), "sampler must be one of"),
    # What the engine refuses: its message.
    (lambda e, n, c: e.sample(_shuffled_grid(2), c, noise=to_tokens(n)), "raster order"),
    (lambda e, n, c: e.sample(cond=c, noise=np.ascontiguousarray(n[:, :, :, :, :4])), "noise"),
    (lambda e, n, c: e.sample(cond=c, noise=np.ascontiguousarray(n[:, :4])), "noise"),
    (lambda e, n, c: e.sample(cond=c[:1], noise=n), r"noise must be f32\[1, 8, 8, 8, 8\]"),
    (lambda e, n, c: e.sample(cond=c, noise=n, out=np.zeros((2, C, R, R, R - 1), np.float32)),
     "out"),
    (lambda e, n, c: e.sample(cond=c, noise=n, concat_cond=np.zeros((2 * R ** 3, 4), np.float32)),
     "concat_cond"),
    (lambda e, n, c: e.forward(n, np.full(3, 1000.0, np.float32), c), "t"),
    (lambda e, n, c: e.forward(n.astype(np.float64), 1000.0, c), "x: dtype float64"),
])
def test_dense_layout_errors_are_one_clear_error(dense_engine, call, message):
    noise, cond = dense_request(2, 10)
    with pytest.raises(s3d.Error, match=message):
        call(dense_engine, noise, cond)
    # The engine still serves requests after each refusal.
    assert dense_engine.forward(noise, 500.0, cond).shape == (2, C, R, R, R)
