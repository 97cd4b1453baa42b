"""The installed sparse3d package on a GPU, against the CLI and the PyTorch oracle
(scripts/device/run.sh python:package runs it after `pip install` of the wheel):

1. Python `Engine.sample()` and the TRELLIS.2 drop-in's whole loop (the pipeline's sampler
   over the accelerated model) against `sparse3d run`'s latents for the same path, bit for
   bit, and their time per request against the CLI's (warm, median of --repeat).
2. Zero copy (data pointers), the caller's stream, a view with a storage offset.
3. Every payload: the pipeline with the original (oracle) module vs accelerated, same run:
   time per asset and the latent's relative L2 error against the original's; plus TRELLIS.2's
   own sampler arithmetic calling the accelerated model once per forward.
4. With --dense-checkpoint (a SparseStructureFlowModel NAME.json): the dense model's
   drop-in. Engine.sample in volume mode (coords=None, [B, 8, R, R, R]) against token mode
   (the full grid in raster order) bit for bit; the pipeline's sparse_structure_sampler over
   the accelerated model (whole loop in the engine, the released sparse-structure settings)
   against Engine.sample bit for bit; against the original (dense oracle behind TRELLIS.2's
   call, dense.py) in time and relative L2; TRELLIS.2's sampler arithmetic over the
   accelerated model per forward.

Writes a JSON (--json) and prints a table last.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import io_formats  # noqa: E402
from model import ModelConfig, SLatFlowModel  # noqa: E402
from trellis2_like import (OracleFlowModel, Pipeline, SparseTensor,  # noqa: E402
                           SparseStructureFlowModel as DenseOriginal)

import sparse3d_engine as s3d  # noqa: E402  (the installed wheel)
import sparse3d_engine.trellis2  # noqa: E402

NAME = "shape_slat_flow_model_1024"


def sync():
    torch.cuda.synchronize()


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return out, times


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def load_cli(path):
    from safetensors.torch import load_file
    return load_file(path)["latent"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--cli-out", required=True, help="sparse3d run's output folder")
    p.add_argument("--cli-times", required=True, help="JSON {asset: [request seconds...]}")
    p.add_argument("--parity-assets", nargs="+", required=True)
    p.add_argument("--path", default="beyond")
    p.add_argument("--repeat", type=int, default=5, help="timed requests per parity asset")
    p.add_argument("--repeat-large", type=int, default=2,
                   help="timed requests per parity asset of 10,000 tokens or more")
    p.add_argument("--cache-dir", default="/tmp/s3d/cache-py")
    p.add_argument("--json", required=True)
    p.add_argument("--skip-original", action="store_true")
    p.add_argument("--dense-checkpoint", default=None,
                   help="a SparseStructureFlowModel NAME.json: also check its drop-in (4.)")
    p.add_argument("--dense-batch", type=int, default=1, help="volumes per dense request")
    p.add_argument("--dense-cond-tokens", type=int, default=1029,
                   help="condition tokens of the dense requests (the pipeline's 512-px DINOv3)")
    p.add_argument("--dense-seed", type=int, default=42)
    a = p.parse_args()
    dev = torch.device("cuda")
    res = {"sparse3d_file": s3d.__file__, "version": s3d.__version__,
           "libraries": s3d._loader.loaded, "path": a.path}
    table = []

    t0 = time.perf_counter()
    args, state = io_formats.load_checkpoint(a.checkpoint)
    cfg = ModelConfig.from_args(args, a.checkpoint)
    oracle = SLatFlowModel.from_state_dict(cfg, state, dev, a.checkpoint)
    del state
    res["oracle_load_s"] = time.perf_counter() - t0
    original = OracleFlowModel(oracle)
    accelerated = Pipeline(original)
    plain = Pipeline(original)
    t0 = time.perf_counter()
    acc = s3d.trellis2.accelerate(accelerated, path=a.path, cache_dir=a.cache_dir)
    model = accelerated.models[NAME]
    engine = model.engine(("cuda", 0))  # built from the module's state dict in memory
    res["engine_from_state_dict_s"] = time.perf_counter() - t0
    res["config_source"] = model.config_source
    res["fingerprint"] = engine.fingerprint()
    table.append(f"engine from the module's state dict: {res['engine_from_state_dict_s']:.2f} s "
                 f"(config from {model.config_source})")

    manifest = io_formats.read_manifest(a.manifest)
    entries = {e["name"]: e for e in manifest["assets"]}
    cli_times = json.load(open(a.cli_times))

    def inputs(name):
        asset = io_formats.read_asset(manifest, entries[name])
        coords = asset["coords"].to(dev)
        T = coords.shape[0]
        noise_np = s3d.draw_noise(asset["noise_seed"], T, cfg.out_channels)
        assert np.array_equal(noise_np, io_formats.normal_tensor(asset["noise_seed"],
                                                                 (T, cfg.out_channels)))
        noise = torch.from_numpy(noise_np).to(dev)
        cond = asset["cond"].to(dev).unsqueeze(0)
        return coords, noise, cond

    # 1. Parity and overhead against the CLI.
    res["parity"] = {}
    for name in a.parity_assets:
        coords, noise, cond = inputs(name)
        cli = load_cli(os.path.join(a.cli_out, name + ".safetensors")).to(dev)
        repeat = a.repeat if coords.shape[0] < 10000 else a.repeat_large
        direct, t_direct = timed(lambda: engine.sample(coords, cond, noise=noise,
                                                       sampler="released"), repeat + 1)
        stats = engine.last_request["stats"]
        whole, t_whole = timed(lambda: accelerated.sample_shape_slat(
            cond, SparseTensor(noise, coords)).feats, repeat + 1)
        cli_t = statistics.median(cli_times[name][1:])  # warm requests
        d_med, w_med = statistics.median(t_direct[1:]), statistics.median(t_whole[1:])
        entry = {"tokens": int(coords.shape[0]),
                 "sample_bitwise_vs_cli": bool(torch.equal(direct, cli)),
                 "dropin_bitwise_vs_cli": bool(torch.equal(whole, cli)),
                 "cli_request_s": cli_t, "python_sample_s": d_med, "dropin_whole_loop_s": w_med,
                 "python_sample_times": t_direct, "dropin_times": t_whole,
                 "engine_request_s": stats["request_seconds"],
                 "overhead_sample_vs_cli": d_med / cli_t - 1,
                 "overhead_dropin_vs_cli": w_med / cli_t - 1}
        res["parity"][name] = entry
        table.append(f"{name} ({entry['tokens']} tokens): sample() bitwise vs CLI "
                     f"{entry['sample_bitwise_vs_cli']}, drop-in loop bitwise "
                     f"{entry['dropin_bitwise_vs_cli']}; CLI {cli_t * 1e3:.1f} ms, sample() "
                     f"{d_med * 1e3:.1f} ms ({entry['overhead_sample_vs_cli'] * 100:+.2f}%), "
                     f"drop-in {w_med * 1e3:.1f} ms ({entry['overhead_dropin_vs_cli'] * 100:+.2f}%)")

    # 2. Zero copy, streams, views.
    name = a.parity_assets[0]
    coords, noise, cond = inputs(name)
    zc = {}
    out = torch.full_like(noise, float("nan"))
    ptr = out.data_ptr()
    got = engine.sample(coords, cond, noise=noise, sampler="released", out=out)
    zc["out_is_callers_buffer"] = got is out and out.data_ptr() == ptr
    zc["out_equals_result"] = bool(torch.equal(out, load_cli(
        os.path.join(a.cli_out, name + ".safetensors")).to(dev)))
    raw = engine._e.forward(noise, torch.tensor([1000.0], device=dev), coords, cond, 1, stream=1)
    v1, v2 = torch.from_dlpack(raw), torch.from_dlpack(raw)
    zc["result_is_a_view"] = v1.data_ptr() == v2.data_ptr() and v1.is_cuda
    big = torch.zeros(noise.shape[0] + 7, noise.shape[1], device=dev)
    big[7:] = noise
    view = big[7:]
    zc["offset_view_same_bits"] = bool(torch.equal(
        engine.forward(view, 1000.0, cond, coords=coords),
        engine.forward(noise.clone(), 1000.0, cond, coords=coords)))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        on_stream = engine.sample(coords, cond, noise=noise, sampler="released")
    s.synchronize()
    zc["callers_stream_same_bits"] = bool(torch.equal(on_stream, got))
    steps = []
    engine.sample(coords, cond, noise=noise, sampler="released",
                  callback=lambda i, t, x: steps.append((i, t, float(x[0, 0]))))
    zc["callback_steps"] = len(steps)
    # low_vram: .cpu() frees the engine's device memory; the next call builds it again.
    del engine  # the script's own reference; results still alive keep only their memory
    sync()
    free0 = torch.cuda.mem_get_info()[0]
    model.cpu()
    import gc
    gc.collect()
    sync()
    zc["cpu_frees_gib"] = round((torch.cuda.mem_get_info()[0] - free0) / 2**30, 2)
    model.to(dev)
    again = accelerated.sample_shape_slat(cond, SparseTensor(noise, coords)).feats
    zc["rebuilt_same_bits"] = bool(torch.equal(again, got))
    engine = model.engine(("cuda", 0))
    res["zero_copy"] = zc
    table.append("zero copy / streams: " + ", ".join(f"{k} {v}" for k, v in zc.items()))

    # 3. Every payload: original vs accelerated, same run.
    res["payloads"] = {}
    if not a.skip_original:
        names = [e["name"] for e in manifest["assets"] if e.get("set", "default") == "default"]
        coords, noise, cond = inputs(names[0])   # warm-up of both sides (cuDNN/cuBLAS plans)
        plain.sample_shape_slat(cond, SparseTensor(noise, coords))
        speedups = []
        for name in names:
            coords, noise, cond = inputs(name)
            x = SparseTensor(noise, coords)
            ref, t_ref = timed(lambda: plain.sample_shape_slat(cond, x).feats, 1)
            whole, t_whole = timed(lambda: accelerated.sample_shape_slat(cond, x).feats, 2)
            sampler = accelerated.shape_slat_sampler.original  # TRELLIS.2's own arithmetic
            loop, t_loop = timed(lambda: sampler.sample(
                model, x, cond, torch.zeros_like(cond), verbose=False,
                **accelerated.shape_slat_sampler_params).samples.feats, 1)
            e = {"tokens": int(coords.shape[0]), "original_s": t_ref[0],
                 "dropin_whole_loop_s": t_whole[-1], "dropin_per_forward_s": t_loop[0],
                 "speedup_whole_loop": t_ref[0] / t_whole[-1],
                 "speedup_per_forward": t_ref[0] / t_loop[0],
                 "rel_l2_whole_vs_original": rel_l2(whole, ref),
                 "rel_l2_per_forward_vs_original": rel_l2(loop, ref)}
            res["payloads"][name] = e
            speedups.append(e["speedup_whole_loop"])
            table.append(f"{name:>18} {e['tokens']:>6} tokens: original {t_ref[0]:.3f} s, "
                         f"drop-in {t_whole[-1]:.3f} s ({e['speedup_whole_loop']:.2f}x; rel L2 "
                         f"{e['rel_l2_whole_vs_original']:.1e}), per-forward "
                         f"{t_loop[0]:.3f} s ({e['speedup_per_forward']:.2f}x; rel L2 "
                         f"{e['rel_l2_per_forward_vs_original']:.1e})")
        res["speedup_geomean"] = float(np.exp(np.mean(np.log(speedups))))
        table.append(f"geomean speedup of the drop-in over the original: "
                     f"{res['speedup_geomean']:.2f}x over {len(speedups)} payloads")
    if a.dense_checkpoint:
        check_dense(a, dev, res, table)
    res["report"] = acc.report()
    res["fallbacks"] = acc.fallbacks()
    res["engine_counters"] = engine.counters()
    table.append("accelerate report:\n" + acc.report())
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print("\n".join(table))


def check_dense(a, dev, res, table):
    """4. The dense model's drop-in (docs/PYTHON.md, "The dense model")."""
    import dense as dense_oracle
    name, args, state = io_formats.load_model_checkpoint(a.dense_checkpoint)
    assert name == "SparseStructureFlowModel", name
    cfg = dense_oracle.config_from_args(args, a.dense_checkpoint)
    oracle = dense_oracle.SparseStructureFlowModel.from_state_dict(cfg, state, dev,
                                                                   a.dense_checkpoint)
    del state
    original = DenseOriginal(oracle)
    plain = Pipeline(dense_model=original)
    accelerated = Pipeline(dense_model=original)
    acc = s3d.trellis2.accelerate(accelerated, path=a.path, cache_dir=a.cache_dir)
    model = accelerated.models["sparse_structure_flow_model"]
    d = {"family": model.family, "config_source": model.config_source}
    R, C, B = cfg.resolution, cfg.out_channels, a.dense_batch
    g = torch.Generator().manual_seed(a.dense_seed)
    noise = torch.randn(B, C, R, R, R, generator=g).to(dev)    # as the pipeline draws it
    cond = torch.randn(B, a.dense_cond_tokens, cfg.cond_channels, generator=g).to(dev)
    params = accelerated.sparse_structure_sampler_params

    # Volume mode against token mode, on the file's engine.
    engine = s3d.Engine(a.dense_checkpoint, path=a.path, cache_dir=a.cache_dir)
    vol, t_vol = timed(lambda: engine.sample(cond=cond, noise=noise,
                                             sampler="released_sparse_structure"), a.repeat + 1)
    assert vol.shape == noise.shape, vol.shape
    steps = engine.last_request["steps"]
    tok = engine.sample(dense_oracle.dense_coords(B, R, dev), cond,
                        noise=dense_oracle.volume_to_tokens(noise).contiguous(),
                        sampler="released_sparse_structure")
    d["volume_vs_token_bitwise"] = bool(torch.equal(
        vol, dense_oracle.tokens_to_volume(tok, R)))
    d["cfg_steps"] = sum(1 for s in steps if s["cfg"])
    d["engine_sample_s"] = statistics.median(t_vol[1:])
    v_vol = engine.forward(noise, 1000.0, cond)
    v_tok = engine.forward(dense_oracle.volume_to_tokens(noise).contiguous(), 1000.0, cond,
                           coords=dense_oracle.dense_coords(B, R, dev))
    d["forward_volume_vs_token_bitwise"] = bool(torch.equal(
        v_vol, dense_oracle.tokens_to_volume(v_tok, R)))

    # The drop-in: the whole loop in the engine, bit for bit Engine.sample.
    whole, t_whole = timed(lambda: accelerated.sample_sparse_structure(cond, noise), a.repeat + 1)
    d["dropin_whole_loop_bitwise_vs_sample"] = bool(torch.equal(whole, vol))
    d["dropin_whole_loop_s"] = statistics.median(t_whole[1:])
    # TRELLIS.2's sampler arithmetic over the accelerated model, one engine forward per call.
    sampler = accelerated.sparse_structure_sampler.original
    loop, t_loop = timed(lambda: sampler.sample(model, noise, cond, torch.zeros_like(cond),
                                                verbose=False, **params).samples, 1)
    d["dropin_per_forward_s"] = t_loop[0]
    d["rel_l2_per_forward_vs_whole"] = rel_l2(loop, whole)
    if not a.skip_original:
        plain.sample_sparse_structure(cond, noise)            # warm-up
        ref, t_ref = timed(lambda: plain.sample_sparse_structure(cond, noise), 2)
        d["original_s"] = min(t_ref)
        d["speedup_whole_loop"] = d["original_s"] / d["dropin_whole_loop_s"]
        d["rel_l2_whole_vs_original"] = rel_l2(whole, ref)
        d["rel_l2_per_forward_vs_original"] = rel_l2(loop, ref)
        d["occupancy_sign_agreement"] = float(((whole > 0) == (ref > 0)).float().mean())
    d["report"] = acc.report()
    d["fallbacks"] = acc.fallbacks()
    res["dense"] = d
    line = (f"dense {B} x {C} x {R}^3, L {a.dense_cond_tokens}: volume vs token bitwise "
            f"{d['volume_vs_token_bitwise']} (forward {d['forward_volume_vs_token_bitwise']}), "
            f"drop-in loop bitwise {d['dropin_whole_loop_bitwise_vs_sample']}, CFG steps "
            f"{d['cfg_steps']}; sample() {d['engine_sample_s'] * 1e3:.1f} ms, drop-in "
            f"{d['dropin_whole_loop_s'] * 1e3:.1f} ms, per-forward {t_loop[0] * 1e3:.1f} ms "
            f"(rel L2 vs whole {d['rel_l2_per_forward_vs_whole']:.1e})")
    if "original_s" in d:
        line += (f"; original {d['original_s'] * 1e3:.1f} ms ({d['speedup_whole_loop']:.2f}x; "
                 f"rel L2 {d['rel_l2_whole_vs_original']:.1e}, per-forward "
                 f"{d['rel_l2_per_forward_vs_original']:.1e})")
    table.append(line)
    table.append("dense accelerate report:\n" + acc.report())


if __name__ == "__main__":
    main()
