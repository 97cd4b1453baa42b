"""CPU self-test of the oracle: runs anywhere torch, numpy and safetensors exist.

  python3 tools/torch_ref/selftest.py            # prints one line per check, then "N passed, N failed"

Checks the noise RNG against a scalar Python-int implementation and against bit patterns
produced by the engine's src/core/rng.cpp, the schedule, the RoPE/APE/timestep layouts,
the strict key check, that a random tiny model runs with the right shapes, that assets in
one batch do not see each other, that batched and serial CFG agree, and the command line
end to end (fixture -> run.py -> compare.py); then the same for the dense sparse-structure
model (dense.py): its host RoPE table (bit for bit the C library's cosf / sinf, padding
pair (1, 0)), APE added before the single rounding, token order and transposes, the
unbiased rescale std, forward shapes, optional table buffers, run.py and make_golden.py.
"""
import contextlib
import io
import math
import os
import sys
import tempfile
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import dense  # noqa: E402
import fixtures  # noqa: E402
import io_formats  # noqa: E402
import run as run_cli  # noqa: E402
import sampler  # noqa: E402
from model import (ModelConfig, SLatFlowModel, TimestepEmbedder, apply_rope,  # noqa: E402
                   ape_embedding, rope_phases)

M64 = (1 << 64) - 1


# --- an independent scalar RNG with Python ints (no numpy) -------------------------------

def _splitmix64_int(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _normal_int(seed, i):
    k = i // 2
    u1 = ((_splitmix64_int(seed ^ _splitmix64_int(2 * k)) >> 11) + 1) * 2.0 ** -53
    u2 = (_splitmix64_int(seed ^ _splitmix64_int(2 * k + 1)) >> 11) * 2.0 ** -53
    r = math.sqrt(-2.0 * math.log(u1))
    a = 2.0 * math.pi * u2
    return float(np.float32(r * math.cos(a) if i % 2 == 0 else r * math.sin(a)))


def _f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def test_rng_matches_scalar_python():
    for seed in (0, 1, 1001, 123456789, 2 ** 53 - 1):
        for begin, count in ((0, 9), (1, 6), (999, 5), (2 ** 33 + 1, 3)):
            vec = io_formats.normal_stream(seed, count, begin)
            ref = [_normal_int(seed, begin + j) for j in range(count)]
            assert [_f32_bits(v) for v in vec] == [_f32_bits(v) for v in ref], \
                (seed, begin, vec, ref)


def test_rng_matches_engine_bits():
    # Bit patterns written by src/core/rng.cpp's normal_fill (g++ -O2 -ffp-contract=off).
    known = {(0, 0): 0xbf1ffa96, (0, 1): 0x3f2e4aa2, (0, 2): 0xbddb862b,
             (1001, 0): 0x3ef3ec82, (1001, 1): 0xbe860e8d, (1001, 2): 0xbf893c15,
             (1001, 3): 0xbf8a0894, (1001, 199999): 0xbece8c04,
             (2 ** 53 - 1, 7): 0x3e00bd83, (2 ** 53 - 1, 8): 0xbe1e795b,
             (2 ** 53 - 1, 200000): 0xbf285338}
    for (seed, i), bits in known.items():
        assert _f32_bits(io_formats.normal_stream(seed, 1, i)[0]) == bits, (seed, i)
        assert _f32_bits(_normal_int(seed, i)) == bits, (seed, i)
    # The tensor form is the flat stream, row-major.
    t = io_formats.normal_tensor(1001, (3, 5))
    assert t.dtype == np.float32 and t.shape == (3, 5)
    assert np.array_equal(t.reshape(-1), io_formats.normal_stream(1001, 15))
    # Statistics of a large draw (catches a wrong constant that still "looks random").
    big = io_formats.normal_tensor(42, (50000, 32))
    assert abs(float(big.mean())) < 0.01 and abs(float(big.std()) - 1) < 0.01


def test_rng_rejects_bad_seed():
    for bad in (-1, 2 ** 53, 1.5):
        try:
            io_formats.normal_stream(bad, 4)
        except ValueError:
            continue
        raise AssertionError(f"seed {bad!r} accepted")


def test_schedule():
    ts = sampler.timesteps(4, 3.0)
    assert ts[0] == 1.0 and ts[-1] == 0.0 and len(ts) == 5
    assert all(abs(a - b) < 1e-15 for a, b in zip(ts, [1.0, 0.9, 0.75, 0.5, 0.0])), ts
    assert sampler.timesteps(3, 1.0) == np.linspace(1, 0, 4).tolist()


def test_rope_phase_layout():
    D = 64                          # freq_dim = 10: 30 phases, then 2 zero phases
    coords = torch.tensor([[0, 3, 5, 7], [0, 63, 0, 1]], dtype=torch.int32)
    ph = rope_phases(coords, D)
    assert ph.shape == (2, 32) and ph.dtype == torch.complex64
    for row, (_, x, y, z) in enumerate(coords.tolist()):
        for p in range(32):
            if p < 30:
                omega = np.float32(1.0 / 10000.0 ** ((p % 10) / 10))
                angle = float(np.float32([x, y, z][p // 10]) * omega)
            else:
                angle = 0.0
            want = complex(math.cos(angle), math.sin(angle))
            assert abs(complex(ph[row, p]) - want) < 2e-6, (row, p, complex(ph[row, p]), want)
    # Pairs (2p, 2p+1) are rotated: (a, b) -> (a cos - b sin, a sin + b cos).
    x = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(0))
    y = apply_rope(x, ph)
    for row in range(2):
        for p in (0, 9, 10, 29, 31):
            c, s = ph[row, p].real, ph[row, p].imag
            a, b = x[row, :, 2 * p], x[row, :, 2 * p + 1]
            assert torch.allclose(y[row, :, 2 * p], a * c - b * s, atol=1e-6)
            assert torch.allclose(y[row, :, 2 * p + 1], a * s + b * c, atol=1e-6)
    assert torch.equal(y[:, :, 60:], x[:, :, 60:])      # phase 0: untouched


def test_ape_and_timestep_layout():
    C = 40                          # freq_dim = 6: 36 values then 4 zeros
    coords = torch.tensor([[0, 2, 0, 5]], dtype=torch.int32)
    e = ape_embedding(coords, C)[0]
    omega = [1.0 / 10000 ** (j / 6) for j in range(6)]
    for axis, c in enumerate((2, 0, 5)):
        base = axis * 12
        for j in range(6):
            assert abs(float(e[base + j]) - math.sin(c * omega[j])) < 1e-5     # sin first
            assert abs(float(e[base + 6 + j]) - math.cos(c * omega[j])) < 1e-5
    assert torch.equal(e[36:], torch.zeros(4))
    emb = TimestepEmbedder.sinusoid(torch.tensor([0.0, 500.0]), 256)
    assert torch.equal(emb[0, :128], torch.ones(128)) and torch.equal(emb[0, 128:], torch.zeros(128))
    assert abs(float(emb[1, 0]) - math.cos(500.0)) < 1e-4       # f_0 = 1: cos first
    assert abs(float(emb[1, 128]) - math.sin(500.0)) < 1e-4


def test_strict_key_check():
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    sd = fixtures.random_state_dict(cfg)
    SLatFlowModel.check_state_dict(cfg, sd)
    assert len(sd) == 8 + 2 + 21 * cfg.num_blocks       # docs/MODEL.md: 21 tensors per block
    bad = dict(sd)
    del bad["blocks.1.cross_attn.k_rms_norm.gamma"]
    bad["blocks.0.extra.weight"] = torch.zeros(3)
    bad["out_layer.bias"] = torch.zeros(31)
    try:
        SLatFlowModel.check_state_dict(cfg, bad)
    except ValueError as e:
        msg = str(e)
        assert "missing blocks.1.cross_attn.k_rms_norm.gamma" in msg, msg
        assert "unexpected blocks.0.extra.weight" in msg, msg
        assert "mis-shaped out_layer.bias" in msg, msg
        return
    raise AssertionError("bad state dict accepted")


def test_runtime_dtypes():
    cfg = ModelConfig.from_args({**fixtures.TINY_ARGS, "share_mod": False})
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    for name, p in m.named_parameters():
        in_block_linear = name.startswith("blocks.") and any(
            s in name for s in (".to_qkv.", ".to_out.", ".to_q.", ".to_kv.", ".mlp.mlp.",
                                ".adaLN_modulation."))
        want = torch.bfloat16 if in_block_linear else torch.float32
        assert p.dtype == want, (name, p.dtype)


def _tiny_request(cfg, counts=(23, 41), L=5, seed=3):
    coords = []
    for b, T in enumerate(counts):
        c = fixtures.random_coords(seed + b, T, cfg.resolution)
        c[:, 0] = b
        coords.append(c)
    coords = torch.cat(coords)
    noise = torch.from_numpy(io_formats.normal_tensor(seed, (coords.shape[0], cfg.out_channels)))
    cond = torch.stack([fixtures.random_cond(seed + 10 + b, L, cfg.cond_channels)
                        for b in range(len(counts))])
    return coords, noise, cond


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_tiny_model_variants_run():
    variants = [{}, {"share_mod": False, "pe_mode": "ape", "qk_rms_norm": False,
                     "qk_rms_norm_cross": False},
                {"num_heads": None, "num_head_channels": 32, "mlp_ratio": 5.3334}]
    for v in variants:
        cfg = ModelConfig.from_args({**fixtures.TINY_ARGS, **v})
        m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg, seed=5))
        coords, noise, cond = _tiny_request(cfg)
        layout = m.prepare_layout(coords, 2)
        with torch.no_grad():
            out = m(noise, torch.tensor([1000.0, 1000.0]), cond, layout)
        assert out.shape == (coords.shape[0], cfg.out_channels) and out.dtype == torch.float32
        assert torch.isfinite(out).all() and out.abs().max() > 0, v


def test_assets_do_not_see_each_other():
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    coords, noise, cond = _tiny_request(cfg)
    layout = m.prepare_layout(coords, 2)
    t = torch.tensor([900.0, 900.0])
    with torch.no_grad():
        a = m(noise, t, cond, layout)
        noise2, cond2 = noise.clone(), cond.clone()
        noise2[23:] += 1.0             # change asset 1 only
        cond2[1] = -cond2[1]
        b = m(noise2, t, cond2, layout)
        single = m(noise[:23], t[:1], cond[:1], m.prepare_layout(coords[:23], 1))
    assert torch.equal(a[:23], b[:23])
    assert not torch.equal(a[23:], b[23:])
    assert _rel(single, a[:23]) < 1e-2          # same asset alone: GEMM shapes differ only


def test_batched_and_serial_cfg_agree():
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    coords, noise, cond = _tiny_request(cfg)
    res = {}
    for mode in ("serial", "batched"):
        s = sampler.SamplerSettings(steps=4, guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                                    guidance_rescale=0.5, cfg_mode=mode)
        res[mode] = sampler.sample(m, noise, coords, cond, settings=s, progress=None)
    for key in ("latent", "v_cond", "v_uncond"):
        r = _rel(res["batched"][key], res["serial"][key])
        assert r < 1e-2, (key, r)
    assert torch.equal(res["serial"]["x_T"], noise)
    assert not torch.equal(res["serial"]["latent"], noise)


def test_cfg_branches():
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    coords, noise, cond = _tiny_request(cfg)
    den = sampler.Denoiser(m, coords, cond, None, sampler.SamplerSettings(guidance_strength=7.5))
    with torch.no_grad():
        v, vp, vn = den.velocity(noise, 1.0)
        assert torch.equal(v, 7.5 * vp + (1 - 7.5) * vn)
        den.s.guidance_interval = (0.0, 0.5)            # t = 1 outside: conditional only
        v, vp, vn = den.velocity(noise, 1.0)
        assert vn is None and torch.equal(v, vp)
        den.s.guidance_interval, den.s.guidance_strength = (0.0, 1.0), 1.0
        assert den.velocity(noise, 1.0)[2] is None
        # The unconditional branch really is the zero condition.
        zero = m(noise, torch.tensor([1000.0, 1000.0]), torch.zeros_like(cond), den.layout)
        den.s.guidance_strength = 0.0
        assert torch.equal(den.velocity(noise, 1.0)[0], zero)


def test_varlen_plumbing_matches_loop():
    """The varlen path's arguments (cu_seqlens, max lengths, cross-attention key offsets),
    checked on the CPU with a stand-in for torch's CUDA-only varlen_attn."""
    placeholder = False
    try:
        import torch.nn.attention.varlen as varlen_module
    except ImportError:     # older torch has no varlen module: a placeholder, removed below
        import types
        varlen_module = types.ModuleType("torch.nn.attention.varlen")
        varlen_module.varlen_attn = None
        sys.modules["torch.nn.attention.varlen"] = varlen_module
        placeholder = True

    def stand_in(q, k, v, cu_q, cu_k, max_q, max_k):
        cq, ck = cu_q.tolist(), cu_k.tolist()
        assert max_q == max(b - a for a, b in zip(cq, cq[1:]))
        assert max_k == max(b - a for a, b in zip(ck, ck[1:]))
        assert cq[-1] == q.shape[0] and ck[-1] == k.shape[0]
        return model_module.attention(q, k, v, cq, ck, "loop")

    import model as model_module
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    coords, noise, cond = _tiny_request(cfg)
    layout = m.prepare_layout(coords, 2)
    t = torch.tensor([500.0, 500.0])
    saved = varlen_module.varlen_attn
    varlen_module.varlen_attn = stand_in
    try:
        with torch.no_grad():
            a = m(noise, t, cond, layout, attn_mode="varlen")
    finally:
        varlen_module.varlen_attn = saved
        if placeholder:
            del sys.modules["torch.nn.attention.varlen"]
    with torch.no_grad():
        b = m(noise, t, cond, layout, attn_mode="loop")
    assert torch.equal(a, b)


def test_per_asset_std():
    cfg = ModelConfig.from_args(fixtures.TINY_ARGS)
    m = SLatFlowModel.from_state_dict(cfg, fixtures.random_state_dict(cfg))
    coords, noise, _ = _tiny_request(cfg)
    layout = m.prepare_layout(coords, 2)
    x = noise * torch.tensor([1.0] * 23 + [3.0] * 41)[:, None] + 0.5
    std = sampler.per_asset_std(x, layout)
    assert std.shape == (2, 1)
    for b, (s, e) in enumerate(((0, 23), (23, 64))):
        assert abs(float(std[b, 0]) - float(np.std(x[s:e].double().numpy()))) < 1e-4


def test_cli_end_to_end():
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), token_counts=(19, 30),
                                           cond_tokens=6)
        common = ["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "3",
                  "--dump-first-forward", "--quiet"]
        log = []
        run_cli.run(common + ["--out", os.path.join(d, "one")], log=log.append)
        run_cli.run(common + ["--out", os.path.join(d, "two"), "--batch-assets",
                              "--cfg-mode", "batched"], log=log.append)
        one = os.path.join(d, "one", "a00-random-19.safetensors")
        two = os.path.join(d, "two", "a00-random-19.safetensors")
        from safetensors.torch import load_file
        t = load_file(one)
        assert sorted(t) == ["coords", "latent", "v_cond", "v_uncond", "x_T"], sorted(t)
        assert t["latent"].shape == (19, 32) and t["coords"].dtype == torch.int32
        assert compare.main([one, two, "--max-rel", "*=2e-2"]) == 0
        assert compare.main([os.path.join(d, "one"), os.path.join(d, "two"),
                             "--max-rel", "latent=2e-2"]) == 0
        # A perturbed latent must fail the threshold.
        bad = {k: v.clone() for k, v in t.items()}
        bad["latent"] = bad["latent"] * 1.1
        path_bad = os.path.join(d, "bad.safetensors")
        io_formats.write_output(path_bad, bad)
        assert compare.main([path_bad, one, "--max-rel", "latent=1e-2"]) == 1
        # g = 1: no unconditional forward, so no v_uncond.
        run_cli.run(common + ["--out", os.path.join(d, "g1"), "--cfg", "1"], log=log.append)
        assert "v_uncond" not in load_file(os.path.join(d, "g1", "a01-random-30.safetensors"))


def test_compile_failure_is_recorded():
    """--compile: a failing compiled call writes "compile": {"ok": false, ...} into the
    timing JSON and exits with code 3 (torch.compile stubbed: no real compilation here)."""
    def broken_compile(fn, **kw):
        def call(*args, **kwargs):
            raise RuntimeError("stub compiler failed\nsecond line")
        return call
    real = torch.compile
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), token_counts=(9,),
                                           cond_tokens=4)
        timing = os.path.join(d, "t.json")
        torch.compile = broken_compile
        try:
            run_cli.run(["--checkpoint", ckpt, "--manifest", man, "--device", "cpu",
                         "--steps", "1", "--quiet", "--timing-json", timing,
                         "--compile", "blocks"], log=lambda *_: None)
            raise AssertionError("expected SystemExit(3)")
        except SystemExit as e:
            assert e.code == 3, e.code
        finally:
            torch.compile = real
        import json
        with open(timing) as f:
            doc = json.load(f)
        assert doc["compile"] == {"mode": "blocks", "ok": False, "stage": "first_call",
                                  "reason": "RuntimeError: stub compiler failed"}, doc
        assert doc["assets"] == {}


# --- the dense sparse-structure model (dense.py, docs/DENSE_MODEL.md) ---------------------

def _dense(overrides=None, seed=5):
    cfg = dense.config_from_args({**fixtures.TINY_SS_ARGS, **(overrides or {})})
    return cfg, dense.SparseStructureFlowModel.from_state_dict(
        cfg, fixtures.random_state_dict(cfg, seed=seed))


def _dense_request(cfg, B, seed=3, L=5):
    T = B * cfg.resolution ** 3
    noise = torch.from_numpy(io_formats.normal_tensor(seed, (T, cfg.out_channels)))
    cond = torch.stack([fixtures.random_cond(seed + 10 + b, L, cfg.cond_channels)
                        for b in range(B)])
    return dense.dense_coords(B, cfg.resolution), noise, cond


def _libm_cos_sin():
    """The C library's single-precision cosf / sinf through ctypes, or None."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("m")
    if not name:
        return None
    libm = ctypes.CDLL(name)
    for f in (libm.cosf, libm.sinf):
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
    return libm.cosf, libm.sinf


def test_dense_config():
    cfg = dense.config_from_args(fixtures.TINY_SS_ARGS)
    assert (cfg.resolution, cfg.head_dim, cfg.mlp_hidden) == (8, 64, 512)
    for bad, want in (({"patch_size": 1}, "patch_size"), ({}, "resolution")):
        args = {**fixtures.TINY_SS_ARGS, **bad}
        if not bad:
            del args["resolution"]
        try:
            dense.config_from_args(args)
        except ValueError as e:
            assert want in str(e), str(e)
            continue
        raise AssertionError(f"accepted {bad or 'no resolution'}")
    # rope_freq is accepted (and ignored: test_dense_rope_host_table).
    dense.config_from_args({**fixtures.TINY_SS_ARGS, "rope_freq": [2.0, 100.0]})
    # The released shape: 640 tensors, 1,292,179,976 parameters (DENSE_MODEL.md).
    big = dense.config_from_args(fixtures.SS_16_ARGS)
    shapes = dense.SparseStructureFlowModel.expected_shapes(big)
    assert len(shapes) == 640, len(shapes)
    assert sum(math.prod(s) for s in shapes.values()) == 1292179976
    assert (big.head_dim, big.mlp_hidden, big.head_dim // 2 // 3) == (128, 8192, 21)


def test_dense_token_order():
    R, B, C = 3, 2, 5
    v = torch.randn(B, C, R, R, R, generator=torch.Generator().manual_seed(1))
    tok = dense.volume_to_tokens(v)
    coords = dense.dense_coords(B, R)
    assert tok.shape == (B * R ** 3, C) and tok.is_contiguous()
    assert coords.dtype == torch.int32 and coords.shape == (B * R ** 3, 4)
    for row in range(B * R ** 3):
        b, n = divmod(row, R ** 3)
        i, j, k = n // (R * R), (n // R) % R, n % R
        assert coords[row].tolist() == [b, i, j, k]
        assert torch.equal(tok[row], v[b, :, i, j, k])
    back = dense.tokens_to_volume(tok, R)
    assert back.is_contiguous() and torch.equal(back, v)
    # The layout insists on the full grid in raster order.
    _, m = _dense()
    m.prepare_layout(dense.dense_coords(2, 8), 2)
    swapped = dense.dense_coords(1, 8)
    swapped[[3, 4]] = swapped[[4, 3]]
    for bad in (swapped, dense.dense_coords(1, 8)[:-1], dense.dense_coords(1, 8).long()):
        try:
            m.prepare_layout(bad, 1)
        except ValueError:
            continue
        raise AssertionError("prepare_layout accepted coords that are not the grid")


def test_dense_rope_host_table():
    R, D = 4, 128                        # freq_dim 21: 63 rotated pairs + 1 padding pair
    tab = dense.host_rope_table(R, D)
    assert tab.shape == (R ** 3, 64) and tab.dtype == torch.complex64
    assert tab.device.type == "cpu"
    omega = torch.arange(21, dtype=torch.float32) / 21
    omega = 1.0 / (10000.0 ** omega)     # fp32, f0 = 1, theta = 10000
    cos_sin = _libm_cos_sin()
    re, im = tab.real.numpy(), tab.imag.numpy()
    for n in range(R ** 3):
        ijk = (n // (R * R), (n // R) % R, n % R)
        for p in range(63):
            angle = np.float32(ijk[p // 21]) * np.float32(omega[p % 21])   # fp32 product
            if cos_sin:          # the host C library's cosf / sinf, bit for bit
                assert _f32_bits(re[n, p]) == _f32_bits(cos_sin[0](float(angle))), (n, p)
                assert _f32_bits(im[n, p]) == _f32_bits(cos_sin[1](float(angle))), (n, p)
            assert abs(re[n, p] - math.cos(angle)) < 1e-6 and \
                abs(im[n, p] - math.sin(angle)) < 1e-6, (n, p)
        assert re[n, 63] == 1.0 and im[n, 63] == 0.0                   # padding pair (1, 0)
        assert _f32_bits(im[n, 63]) == 0                                # +0, not -0
    # The model's table: this one for its R and D, whatever rope_freq says, tiled per asset.
    cfg, m = _dense({"rope_freq": [2.0, 100.0]})
    assert torch.equal(m.rope_phases, dense.host_rope_table(8, 64))
    assert m.pos_emb is None
    layout = m.prepare_layout(dense.dense_coords(2, 8), 2)
    assert torch.equal(layout.rope_phases, torch.cat([m.rope_phases, m.rope_phases]))
    assert layout.ape is None


def test_dense_ape_before_rounding():
    cfg, m = _dense({"pe_mode": "ape", "model_channels": 96, "num_heads": 2})
    R, C = cfg.resolution, cfg.model_channels
    assert m.rope_phases is None
    assert torch.equal(m.pos_emb, ape_embedding(dense.dense_coords(1, R), C))
    assert m.pos_emb.dtype == torch.float32 and m.pos_emb.shape == (R ** 3, C)
    coords, noise, _ = _dense_request(cfg, 2)
    layout = m.prepare_layout(coords, 2)
    assert torch.equal(layout.ape, torch.cat([m.pos_emb, m.pos_emb]))
    with torch.no_grad():
        h = m.embed_tokens(noise, layout.ape)
        fp32 = m.input_layer(noise) + layout.ape
        twice = m.input_layer(noise).to(torch.bfloat16) + layout.ape.to(torch.bfloat16)
    assert h.dtype == torch.bfloat16
    assert torch.equal(h, fp32.to(torch.bfloat16))         # one rounding after the fp32 sum
    assert not torch.equal(h, twice)                        # not the SLat's two roundings


def test_dense_unbiased_std():
    cfg, m = _dense()
    R = cfg.resolution
    coords, noise, _ = _dense_request(cfg, 2)
    layout = m.prepare_layout(coords, 2)
    x = noise * torch.tensor([1.0] * R ** 3 + [3.0] * R ** 3)[:, None] + 0.5
    std = sampler.dense_asset_std(x, layout, R)
    vol = dense.tokens_to_volume(x, R)
    assert std.shape == (2, 1)
    assert torch.equal(std.reshape(-1), vol.std(dim=[1, 2, 3, 4]))   # the original's call
    for b in range(2):
        rows = x[b * R ** 3:(b + 1) * R ** 3].double().numpy()
        assert abs(float(std[b, 0]) - float(np.std(rows, ddof=1))) < 1e-5
        assert abs(float(std[b, 0]) - float(np.std(rows))) > 1e-5     # not the population std
    assert sampler.guidance_std_fn(m) is not sampler.per_asset_std
    slat = SLatFlowModel.from_state_dict(ModelConfig.from_args(fixtures.TINY_ARGS),
                                         fixtures.random_state_dict(
                                             ModelConfig.from_args(fixtures.TINY_ARGS)))
    assert sampler.guidance_std_fn(slat) is sampler.per_asset_std


def test_dense_forward_shapes():
    variants = [{}, {"pe_mode": "ape", "share_mod": False, "qk_rms_norm": False,
                     "qk_rms_norm_cross": False},
                {"num_heads": None, "num_head_channels": 32, "mlp_ratio": 5.3334,
                 "in_channels": 8, "out_channels": 8, "resolution": 4}]
    for v in variants:
        cfg, m = _dense(v)
        R = cfg.resolution
        coords, noise, cond = _dense_request(cfg, 2)
        layout = m.prepare_layout(coords, 2)
        t = torch.tensor([1000.0, 600.0])
        with torch.no_grad():
            out = m(noise, t, cond, layout)
            vol = m.forward_volume(dense.tokens_to_volume(noise, R), t, cond)
        assert out.shape == (2 * R ** 3, cfg.out_channels) and out.dtype == torch.float32, v
        assert torch.isfinite(out).all() and out.abs().max() > 0, v
        assert vol.shape == (2, cfg.out_channels, R, R, R)
        assert torch.equal(vol, dense.tokens_to_volume(out, R)), v
    # Assets do not see each other; the condition is per asset; no concat_cond.
    cfg, m = _dense()
    N = cfg.resolution ** 3
    coords, noise, cond = _dense_request(cfg, 2)
    layout = m.prepare_layout(coords, 2)
    t = torch.tensor([900.0, 900.0])
    with torch.no_grad():
        a = m(noise, t, cond, layout)
        noise2, cond2 = noise.clone(), cond.clone()
        noise2[N:] += 1.0
        cond2[1] = -cond2[1]
        b = m(noise2, t, cond2, layout)
        for bad in (dict(cond=cond[:1]), dict(concat_cond=noise)):
            try:
                m(noise, t, bad.get("cond", cond), layout, bad.get("concat_cond"))
            except ValueError:
                continue
            raise AssertionError(f"accepted {sorted(bad)}")
    assert torch.equal(a[:N], b[:N]) and not torch.equal(a[N:], b[N:])
    # The dense model through the sampler: serial and batched CFG agree.
    res = {}
    for mode in ("serial", "batched"):
        s = sampler.SamplerSettings(steps=3, guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                                    guidance_rescale=0.7, cfg_mode=mode)
        res[mode] = sampler.sample(m, noise, coords, cond, settings=s, progress=None)
    assert res["serial"]["latent"].shape == noise.shape
    assert _rel(res["batched"]["latent"], res["serial"]["latent"]) < 1e-2


def test_dense_checkpoint_buffers():
    cfg = dense.config_from_args(fixtures.TINY_SS_ARGS)
    sd = fixtures.random_state_dict(cfg)
    assert len(sd) == 10 + 21 * cfg.num_blocks
    # A stored table is optional; when present it replaces the computed one.
    table = dense.host_rope_table(8, 64) * torch.polar(torch.ones(()), torch.tensor(0.25))
    m = dense.SparseStructureFlowModel.from_state_dict(cfg, {**sd, "rope_phases": table})
    assert torch.equal(m.rope_phases, table)
    for extra, want in ((("rope_phases", torch.zeros(512, 31, dtype=torch.complex64)),
                         "mis-shaped rope_phases"),
                        (("rope_phases", torch.zeros(512, 32)), "bad dtype rope_phases"),
                        (("pos_emb", torch.zeros(512, 128)), "unexpected pos_emb")):
        try:
            dense.SparseStructureFlowModel.check_state_dict(cfg, {**sd, extra[0]: extra[1]})
        except ValueError as e:
            assert want in str(e), str(e)
            continue
        raise AssertionError(f"accepted {extra[0]}")
    bad = dict(sd)
    del bad["input_layer.bias"]
    try:
        dense.SparseStructureFlowModel.check_state_dict(cfg, bad)
        raise AssertionError("missing tensor accepted")
    except ValueError as e:
        assert "missing input_layer.bias" in str(e), str(e)
    acfg = dense.config_from_args({**fixtures.TINY_SS_ARGS, "pe_mode": "ape"})
    pos = torch.full((512, 128), 0.5)
    m = dense.SparseStructureFlowModel.from_state_dict(acfg, {**sd, "pos_emb": pos})
    assert torch.equal(m.pos_emb, pos)


def test_dense_cli_end_to_end():
    from safetensors.torch import load_file
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        ckpt, man = fixtures.write_fixture(
            os.path.join(d, "in"), args=fixtures.TINY_SS_ARGS, name="tiny-ss", cond_tokens=6,
            model_name=dense.MODEL_NAME, assets=2)
        assert io_formats.read_model_config(ckpt)[0] == "SparseStructureFlowModel"
        m = io_formats.read_manifest(man)
        assert m["grid"] == 8 and [e["tokens"] for e in m["assets"]] == [512, 512]
        common = ["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "3",
                  "--dump-first-forward", "--quiet", "--interval", "0.6", "1.0",
                  "--guidance-rescale", "0.7", "--rescale-t", "5"]
        log = []
        run_cli.run(common + ["--out", os.path.join(d, "one")], log=log.append)
        run_cli.run(common + ["--out", os.path.join(d, "two"), "--batch-assets",
                              "--cfg-mode", "batched"], log=log.append)
        name = "a01-grid-8.safetensors"
        t = load_file(os.path.join(d, "one", name))
        assert sorted(t) == ["coords", "latent", "v_cond", "v_uncond", "x_T"], sorted(t)
        assert t["latent"].shape == (512, 8)
        assert torch.equal(t["coords"], dense.dense_coords(1, 8))
        # FORMATS.md: the dense noise fills the volume [out, R^3], then goes to tokens.
        assert torch.equal(t["x_T"], torch.from_numpy(io_formats.normal_tensor(1002, (8, 512))).t())
        assert compare.main([os.path.join(d, "one"), os.path.join(d, "two"),
                             "--max-rel", "*=2e-2"]) == 0
        # The same request through the oracle's volume call and sampler by hand.
        cfg, model = run_cli.load_model(ckpt, "cpu")
        asset = io_formats.read_asset(m, m["assets"][1])
        s = sampler.SamplerSettings(steps=3, rescale_t=5.0, guidance_interval=(0.6, 1.0),
                                    guidance_rescale=0.7)
        r = sampler.sample(model, t["x_T"], asset["coords"], asset["cond"][None], None, s,
                           progress=None)
        assert torch.equal(r["latent"], t["latent"])
        # A SLat-shaped manifest does not fit the dense model.
        slat_ckpt, slat_man = fixtures.write_fixture(os.path.join(d, "slat"),
                                                     token_counts=(9,), cond_tokens=6)
        try:
            run_cli.run(["--checkpoint", ckpt, "--manifest", slat_man, "--device", "cpu",
                         "--steps", "1", "--quiet"], log=log.append)
            raise AssertionError("dense model accepted a sparse payload")
        except ValueError as e:
            assert "grid" in str(e) or "tokens" in str(e), str(e)
        # make_golden with the dense preset.
        import make_golden
        make_golden.main(["--preset", "tiny-ss", "--out", os.path.join(d, "golden"),
                          "--device", "cpu", "--steps", "2", "--case", "interval-rescale"])
        g = load_file(os.path.join(d, "golden", "interval-rescale", "a00-grid-8.safetensors"))
        assert g["latent"].shape == (512, 8)


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            torch.manual_seed(0)
            fn()
            print(f"PASS {name}")
            passed += 1
        except Exception:
            print(f"FAIL {name}")
            traceback.print_exc()
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
