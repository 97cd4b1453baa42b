"""Command line of the PyTorch oracle: denoise the assets of a payload manifest with a
checkpoint and write one output file per asset, in the engine's output format. The
checkpoint is an SLatFlowModel or a dense SparseStructureFlowModel (its NAME.json's
"name"); a dense model's assets are full grids (dense.dense_coords), its outputs tokens
[R^3, out] in raster order like any other asset's.

  python3 tools/torch_ref/run.py --checkpoint ckpt/tiny.json --manifest payloads/m.json \
      --out out/torch --device cuda --steps 15 --cfg 7.5 --dump-first-forward --time
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dense  # noqa: E402
import io_formats  # noqa: E402
from model import ModelConfig, SLatFlowModel  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compact_json  # noqa: E402  (tools/: the bench results' JSON layout)
from sampler import SamplerSettings, sample  # noqa: E402


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="NAME.json (NAME.safetensors beside it)")
    p.add_argument("--manifest", required=True, help="payload manifest JSON")
    p.add_argument("--asset", action="append", default=None,
                   help="asset name to run (repeatable; default: all, in manifest order)")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--rescale-t", type=float, default=3.0)
    p.add_argument("--cfg", type=float, default=7.5, help="guidance strength g")
    p.add_argument("--interval", type=float, nargs=2, default=(0.0, 1.0), metavar=("LO", "HI"),
                   help="guidance interval: CFG only for LO <= t <= HI")
    p.add_argument("--guidance-rescale", type=float, default=0.0)
    p.add_argument("--cfg-mode", choices=("serial", "batched"), default="serial")
    p.add_argument("--attn", choices=("loop", "varlen"), default="loop",
                   help="loop: SDPA per asset; varlen: torch.nn.attention.varlen (CUDA only)")
    p.add_argument("--sdpa-backend", choices=("auto", "flash", "cudnn", "efficient", "math"),
                   default="auto", help="restrict scaled_dot_product_attention (--attn loop) "
                   "to one backend; auto lets torch choose")
    p.add_argument("--batch-assets", action="store_true",
                   help="denoise all selected assets as one batch (default: one at a time)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--out", default=None, help="folder for <asset>.safetensors outputs")
    p.add_argument("--dump-first-forward", action="store_true",
                   help="also write x_T, v_cond and v_uncond of the first step")
    p.add_argument("--time", action="store_true",
                   help="print per-step and total device-synchronised wall time")
    p.add_argument("--warmup", type=int, default=0,
                   help="untimed runs of the first group before the real ones (benchmarking); "
                   "with --service, of the warm-up request")
    p.add_argument("--repeat", type=int, default=1,
                   help="denoise each group N times (timing spread); outputs from the last "
                   "(0 with --service: the first calls only)")
    p.add_argument("--service", action="store_true",
                   help="the bench's service protocol: the warm-up runs a request at a token "
                   "count no asset has (--warmup-tokens; a dense model: two copies of the "
                   "first asset in one request), then every group once in order, timed as "
                   "its whole call (first_seconds in --timing-json), then the --repeat runs")
    p.add_argument("--warmup-tokens", type=int, default=0,
                   help="--service: the warm-up request's tokens, the first ones of the "
                   "largest asset with the first asset's condition (0: 3/4 of the smallest "
                   "asset's count, moved off any asset's count, as `sparse3d bench` picks)")
    p.add_argument("--timing-json", default=None,
                   help="write per-asset loop times (every repeat, per step) to this JSON file")
    p.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    p.add_argument("--compile", choices=("none", "blocks", "model"), default="none",
                   help="torch.compile (dynamic shapes, graph breaks allowed): blocks = each "
                   "transformer block and the token input/output layers; model = the whole "
                   "denoiser forward. Warm-up then runs every group once (compilation) "
                   "before --warmup - 1 more runs of the first; a failure is recorded in "
                   "--timing-json and exits with code 3")
    return p


def load_model(checkpoint, device):
    """(config, model) of NAME.json: SLatFlowModel or dense.SparseStructureFlowModel."""
    name, args, state = io_formats.load_model_checkpoint(checkpoint)
    where = f"checkpoint {io_formats.checkpoint_tensors_path(checkpoint)}"
    if name == dense.MODEL_NAME:
        cfg = dense.config_from_args(args, f"checkpoint config {checkpoint}")
        return cfg, dense.SparseStructureFlowModel.from_state_dict(cfg, state, device, where)
    cfg = ModelConfig.from_args(args, f"checkpoint config {checkpoint}")
    return cfg, SLatFlowModel.from_state_dict(cfg, state, device, where)


def select_entries(manifest, names):
    if not names:
        return list(manifest["assets"])
    by_name = {e["name"]: e for e in manifest["assets"]}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"assets {missing} are not in the manifest; it has "
                         f"{[e['name'] for e in manifest['assets']]}")
    return [by_name[n] for n in names]


def pack_group(assets, cfg, device, is_dense=False):
    """Packed coords (batch column = position in the group), noise, cond [B, L, Cc] and
    concat_cond for a group of assets read by io_formats.read_asset."""
    coords, noise, concat = [], [], []
    for b, a in enumerate(assets):
        c = a["coords"].clone()
        c[:, 0] = b
        coords.append(c)
        if is_dense:
            # The dense model's noise fills its volume [out, R^3] (the original's order),
            # then goes to the token layout, as the engine draws it (docs/FORMATS.md).
            noise.append(torch.from_numpy(
                io_formats.normal_tensor(a["noise_seed"], (cfg.out_channels, c.shape[0]))).t()
                .contiguous())
        else:
            noise.append(torch.from_numpy(
                io_formats.normal_tensor(a["noise_seed"], (c.shape[0], cfg.out_channels))))
        if a["concat_cond"] is not None:
            concat.append(a["concat_cond"])
    cond_dtype = torch.float32 if any(a["cond"].dtype == torch.float32 for a in assets) \
        else torch.bfloat16
    cond = torch.stack([a["cond"].to(cond_dtype) for a in assets])
    return (torch.cat(coords).to(device), torch.cat(noise).to(device), cond.to(device),
            torch.cat(concat).to(device) if concat else None)


def service_warmup_tokens(asset_tokens, requested, grid_cells):
    """`sparse3d bench`'s choice (bench/runner.h service_warmup_tokens): `requested` when > 0
    (not an asset's count, at most the grid's cells), else 3/4 of the smallest asset's
    count, moved up past any asset's count when that is 0 or taken."""
    taken = set(asset_tokens)
    if requested < 0:
        raise ValueError(f"--warmup-tokens must be >= 0, got {requested}")
    if requested > 0:
        if requested in taken:
            raise ValueError(f"--warmup-tokens {requested}: an asset has that many tokens; the "
                             "warm-up request must be at a token count outside the asset set")
        if requested > grid_cells:
            raise ValueError(f"--warmup-tokens {requested}: the grid has {grid_cells} cells")
        return requested
    for n in range(max(1, min(asset_tokens) * 3 // 4), max(grid_cells, max(asset_tokens)) + 1):
        if n not in taken:
            return n
    raise ValueError(f"every token count up to the grid's {grid_cells} is an asset's; the "
                     "service protocol's warm-up request needs one outside the set")


def service_warmup_group(manifest, entries, requested, is_dense):
    """(assets of the warm-up request, its description), `sparse3d bench`'s engine warm-up:
    the first asset's condition with the first N tokens of the largest asset (the first of
    equals) or, for more, the grid's first N voxels in raster order (zero concat_cond); for a
    dense model (whole grids only) two copies of the first asset."""
    first = io_formats.read_asset(manifest, entries[0])
    if is_dense:
        return [first, first], f"2 copies of {first['name']} in one request"
    grid = manifest["grid"]
    n = service_warmup_tokens([e["tokens"] for e in entries], requested, grid ** 3)
    big = io_formats.read_asset(manifest, max(entries, key=lambda e: e["tokens"]))
    concat = big["concat_cond"]
    if n < big["coords"].shape[0]:
        part = dict(big, name=f"{big['name']}[:{n}]", coords=big["coords"][:n],
                    concat_cond=None if concat is None else concat[:n])
        what = f"the first {n} tokens of {big['name']}"
    else:
        part = dict(big, name=f"raster-{n}", coords=dense.dense_coords(1, grid)[:n],
                    concat_cond=None if concat is None
                    else torch.zeros(n, concat.shape[1], dtype=concat.dtype))
        what = f"the grid's first {n} voxels in raster order"
    return [dict(part, cond=first["cond"])], what


def check_compatible(cfg, manifest, is_dense=False):
    if is_dense:
        R = cfg.resolution
        if manifest["grid"] != R:
            raise ValueError(f"manifest grid {manifest['grid']} != dense model resolution {R}")
        bad = [e["name"] for e in manifest["assets"] if e["tokens"] != R ** 3]
        if bad:
            raise ValueError(f"dense model: every asset must have {R ** 3} tokens (the full "
                             f"{R}^3 grid); not so for {bad}")
    if manifest["cond_channels"] != cfg.cond_channels:
        raise ValueError(f"manifest cond_channels {manifest['cond_channels']} != model "
                         f"cond_channels {cfg.cond_channels}")
    if cfg.out_channels + manifest["concat_channels"] != cfg.in_channels:
        raise ValueError(f"model in_channels {cfg.in_channels} must equal out_channels "
                         f"{cfg.out_channels} + manifest concat_channels "
                         f"{manifest['concat_channels']}")


_SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                  "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def sdpa_context(name):
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, _SDPA_BACKENDS[name]))


# ---------------------------------------------------------------------------------------
# --compile
# ---------------------------------------------------------------------------------------

class CompileFailed(Exception):
    """A compiled call raised; .info is the timing JSON's "compile" entry."""

    def __init__(self, info):
        super().__init__(info["reason"])
        self.info = info


def _first_line(e):
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def failure_reason(e):
    """"<type>: <first line>", plus the innermost cause when there is one (inductor wraps
    compiler errors: BackendCompilerFailed -> InductorError -> CppCompileError)."""
    reason = f"{type(e).__name__}: {_first_line(e)}"
    root, seen = e, {id(e)}
    while (root.__cause__ or root.__context__) is not None and \
            id(root.__cause__ or root.__context__) not in seen:
        root = root.__cause__ or root.__context__
        seen.add(id(root))
    if root is not e and _first_line(root) not in reason:
        reason += f" (cause {type(root).__name__}: {_first_line(root)})"
    return reason[:1000]


def _dynamo_stats():
    """(graph breaks, compiled frames, recompiles, recompile reasons) so far in this
    process, from torch._dynamo's counters and compilation metrics where they exist."""
    try:
        from torch._dynamo import utils as du
    except Exception:       # noqa: BLE001 -- no dynamo: nothing to count
        return 0, None, None, []
    breaks = sum(du.counters["graph_break"].values())
    if not hasattr(du, "get_compilation_metrics"):
        return breaks, None, None, []
    metrics = du.get_compilation_metrics()
    reasons = [m.recompile_reason for m in metrics if getattr(m, "recompile_reason", None)]
    return breaks, len(metrics), len(reasons), reasons


class Compiler:
    """Applies --compile to the model and records what happened for the timing JSON."""

    def __init__(self, mode):
        self.mode = mode
        self.info = {"mode": mode}
        self.stage = "setup"
        self.calls = 0
        self.compile_seconds = None

    def apply(self, model):
        import torch._dynamo
        torch._dynamo.reset()          # a fresh cache for this model (matters in-process)
        du = torch._dynamo.utils
        if hasattr(du, "clear_compilation_metrics"):
            du.clear_compilation_metrics()
            du.set_compilation_metrics_limit(1 << 20)     # count every compilation
        # Past the recompile limit dynamo silently falls back to eager; that is not a
        # compiled baseline, so make it an error (recorded as the reason).
        # (torch before 2.6 has no such option; there the limit stays a silent fall back.)
        if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
            torch._dynamo.config.fail_on_recompile_limit_hit = True
        self.base = _dynamo_stats()
        opts = dict(dynamic=True, fullgraph=False)
        if self.mode == "blocks":
            for block in model.blocks:
                block.forward = torch.compile(block.forward, **opts)
            model.embed_tokens = torch.compile(model.embed_tokens, **opts)
            model.output_tokens = torch.compile(model.output_tokens, **opts)
        else:
            model.forward = torch.compile(model.forward, **opts)

    def call(self, stage, fn):
        """fn() (a sample() call) under a stage name; the first call's loop time (which
        includes the compilation) is compile_seconds."""
        self.stage = stage
        try:
            out = fn()
        except Exception as e:
            self.fail(e)
        if self.calls == 0:
            self.compile_seconds = out["total_seconds"]
        self.calls += 1
        return out

    def fail(self, e):
        sys.stderr.write(f"torch.compile ({self.mode}) failed at stage {self.stage}:\n")
        traceback.print_exc(file=sys.stderr)
        self.info = {"mode": self.mode, "ok": False, "stage": self.stage,
                     "reason": failure_reason(e)}
        raise CompileFailed(self.info) from None

    def mark_timed(self):
        """Called after the warm-up: compilations from here on are inside timed runs."""
        self.warmup_calls = self.calls
        self.warm = _dynamo_stats()

    def finish(self, bad):
        """The "compile" entry after the timed runs; bad lists the assets with non-finite
        outputs, which make the compiled run a failure (stage "outputs")."""
        if bad:
            self.stage = "outputs"
            self.info = {"mode": self.mode, "ok": False, "stage": "outputs",
                         "reason": f"non-finite outputs: {'; '.join(bad)}"[:1000]}
            raise CompileFailed(self.info)
        breaks, frames, recompiles, reasons = _dynamo_stats()
        b0, f0, r0, _ = self.base
        self.info = {"mode": self.mode, "ok": True, "compile_seconds": self.compile_seconds,
                     "graph_breaks": breaks - b0}
        if frames is not None:
            self.info.update(recompiles=recompiles - r0,
                             recompile_reasons=[r[:300] for r in reasons[r0:][:5]],
                             compiled_frames=frames - f0,
                             timed_compilations=frames - self.warm[1])
        self.info["warmup_calls"] = self.warmup_calls
        return self.info


def run(argv=None, log=print):
    a = build_parser().parse_args(argv)
    device = torch.device(a.device)
    if a.attn == "varlen" and device.type != "cuda":
        raise SystemExit("--attn varlen needs a CUDA device (flash varlen attention)")
    if a.service and a.compile != "none":
        raise SystemExit("--service with --compile: a compiled run compiles every group in "
                         "its warm-up, so it has no first calls to time")
    if a.repeat < (0 if a.service else 1):
        raise SystemExit(f"--repeat {a.repeat}: must be >= 1 (>= 0 with --service)")
    cfg, model = load_model(a.checkpoint, device)
    manifest = io_formats.read_manifest(a.manifest)
    is_dense = isinstance(model, dense.SparseStructureFlowModel)
    check_compatible(cfg, manifest, is_dense)
    entries = select_entries(manifest, a.asset)
    settings = SamplerSettings(steps=a.steps, rescale_t=a.rescale_t, guidance_strength=a.cfg,
                               guidance_interval=tuple(a.interval),
                               guidance_rescale=a.guidance_rescale, cfg_mode=a.cfg_mode,
                               attn_mode=a.attn)
    settings.validate()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    log(f"torch {torch.__version__} device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f"; model {'dense R=' + str(cfg.resolution) + ' ' if is_dense else ''}"
        f"C={cfg.model_channels} blocks={cfg.num_blocks} heads={cfg.num_heads}"
        f"x{cfg.head_dim} pe={cfg.pe_mode} share_mod={cfg.share_mod} dtype={cfg.dtype}")
    log(f"settings: {settings}; sdpa backend: {a.sdpa_backend}")

    if a.compile == "none":
        with sdpa_context(a.sdpa_backend):
            return _run_groups(a, cfg, model, manifest, entries, settings, device, log)

    comp = Compiler(a.compile)
    results = {}
    try:
        try:
            comp.apply(model)
        except Exception as e:
            comp.fail(e)
        with sdpa_context(a.sdpa_backend):
            _run_groups(a, cfg, model, manifest, entries, settings, device, log, comp, results)
    except CompileFailed as e:
        log(f"torch.compile ({a.compile}) failed at stage {e.info['stage']}: "
            f"{e.info['reason']}")
        if a.timing_json:
            write_timing(a, device, settings, results, e.info)
            log(f"wrote {a.timing_json}")
        raise SystemExit(3)
    return results


def write_timing(a, device, settings, results, compile_info=None, warmup_request=None):
    doc = {"torch": torch.__version__, "device": str(device),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
           "settings": vars(settings), "sdpa_backend": a.sdpa_backend,
           "warmup": a.warmup, "protocol": "service" if a.service else "repeated",
           "assets": results}
    if warmup_request is not None:
        doc["warmup_request"] = warmup_request
    if compile_info is not None:
        doc["compile"] = compile_info
    with open(a.timing_json, "w") as f:
        compact_json.dump(doc, f)


class DevicePeak:
    """Device-wide memory in use (cudaMemGetInfo: every allocation on the device) read every
    2 ms on a thread while a `with` block runs; .above_start is the highest reading above the
    one taken on entry (what sparse3d bench's DevicePeak measures for an engine path)."""

    def __init__(self, device):
        self.device = device
        self.above_start = 0

    def _used(self):
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def __enter__(self):
        import threading
        self.start = self.peak = self._used()
        self.stop = threading.Event()

        def poll():
            while not self.stop.is_set():
                self.peak = max(self.peak, self._used())
                self.stop.wait(0.002)
        self.thread = threading.Thread(target=poll, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self._used())
        self.above_start = self.peak - self.start
        return False


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def whole_call(device, fn):
    """(fn(), seconds): host wall time of the whole call, the device synchronised before and
    after (sample()'s own total_seconds leaves out its set-up)."""
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def _run_groups(a, cfg, model, manifest, entries, settings, device, log, comp=None,
                results=None):
    groups = [entries] if a.batch_assets else [[e] for e in entries]
    progress = None if a.quiet else log
    is_dense = isinstance(model, dense.SparseStructureFlowModel)
    warmup_request = None
    if a.service:   # the warm-up at a token count no asset has (--service excludes --compile)
        warm_assets, warmup_request = service_warmup_group(manifest, entries, a.warmup_tokens,
                                                           is_dense)
        warm_groups = [warm_assets] * a.warmup
        call = lambda stage, fn: fn()   # noqa: E731
    elif comp is None:
        warm_groups = [[io_formats.read_asset(manifest, e) for e in groups[0]]] * a.warmup
        call = lambda stage, fn: fn()   # noqa: E731
    else:   # every group once (compiles, and recompiles if a shape needs one), then as eager
        warm_groups = [[io_formats.read_asset(manifest, e) for e in g] for g in groups] + \
            [[io_formats.read_asset(manifest, e) for e in groups[0]]] * max(0, a.warmup - 1)
        call = comp.call
    for w, group in enumerate(warm_groups):
        coords, noise, cond, concat = pack_group(group, cfg, device, is_dense)
        call("first_call" if w == 0 else "warmup",
             lambda: sample(model, noise, coords, cond, concat, settings, progress=None))
        log(f"warm-up {w + 1}/{len(warm_groups)} done"
            + (f" ({warmup_request})" if warmup_request else ""))
    if comp is not None:
        comp.mark_timed()
    # The service protocol: every group's first call, in order, before any repeat.
    first = {}
    for gi, group in enumerate(groups if a.service else []):
        assets = [io_formats.read_asset(manifest, e) for e in group]
        coords, noise, cond, concat = pack_group(assets, cfg, device, is_dense)
        res, seconds = whole_call(device, lambda: sample(model, noise, coords, cond, concat,
                                                         settings, progress=None))
        first[gi] = (res, seconds)
        names = ", ".join(f"{x['name']} ({x['coords'].shape[0]} tokens)" for x in assets)
        log(f"first call {names}: {seconds * 1e3:.1f} ms")
    results = {} if results is None else results
    nonfinite = []
    for gi, group in enumerate(groups):
        assets = [io_formats.read_asset(manifest, e) for e in group]
        coords, noise, cond, concat = pack_group(assets, cfg, device, is_dense)
        names = ", ".join(f"{x['name']} ({x['coords'].shape[0]} tokens)" for x in assets)
        log(f"denoising {names}")
        totals, per_step, calls = [], [], []
        # Peak memory over the timed repeats, from the allocator's own counters: bytes in
        # tensors (max_memory_allocated, the model's weights included) and bytes reserved.
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.empty_cache()     # the device-wide figure starts from nothing cached
        res = first[gi][0] if gi in first else None
        poll = DevicePeak(device) if device.type == "cuda" else contextlib.nullcontext()
        with poll:
            for _ in range(a.repeat if a.service else max(1, a.repeat)):
                res, seconds = whole_call(device, lambda: call(
                    "timed", lambda: sample(model, noise, coords, cond, concat, settings,
                                            progress=progress)))
                totals.append(res["total_seconds"])
                per_step.append(res["step_seconds"])
                calls.append(seconds)
                if a.time:
                    steps = " ".join(f"{s * 1e3:.1f}" for s in res["step_seconds"])
                    log(f"time {names}: total {res['total_seconds'] * 1e3:.1f} ms; "
                        f"per step (ms): {steps}")
        if a.time and len(totals) > 1:
            log(f"time {names}: median {statistics.median(totals) * 1e3:.1f} ms, "
                f"min {min(totals) * 1e3:.1f}, max {max(totals) * 1e3:.1f} over {len(totals)}")
        start = 0
        for x in assets:
            T = x["coords"].shape[0]
            rows = slice(start, start + T)
            start += T
            tensors = {"latent": res["latent"][rows], "coords": x["coords"]}
            if a.dump_first_forward:
                for key in ("x_T", "v_cond", "v_uncond"):
                    if res[key] is not None:
                        tensors[key] = res[key][rows]
            bad = [k for k, v in tensors.items() if v.is_floating_point() and
                   not bool(torch.isfinite(v).all())]
            if bad:
                nonfinite.append(f"{x['name']} {bad}")
                log(f"WARNING {x['name']}: non-finite values in {bad}")
            results[x["name"]] = {"tokens": T, "batch": [y["name"] for y in assets],
                                  "total_seconds": totals, "step_seconds": per_step,
                                  "call_seconds": calls}
            if gi in first:
                results[x["name"]]["first_seconds"] = first[gi][1]
            if device.type == "cuda" and totals:
                weights = sum(t.numel() * t.element_size() for t in model.parameters())
                results[x["name"]].update(
                    peak_allocated_bytes=int(torch.cuda.max_memory_allocated()),
                    peak_reserved_bytes=int(torch.cuda.max_memory_reserved()),
                    device_peak_bytes=int(weights + poll.above_start))
            if a.out:
                path = os.path.join(a.out, f"{x['name']}.safetensors")
                io_formats.write_output(path, tensors)
                log(f"wrote {path}")
    compile_info = None
    if comp is not None:     # after the outputs are written, so that they exist either way
        compile_info = comp.finish(nonfinite)
        log(f"compile: {json.dumps(compile_info)}")
    if a.timing_json:
        write_timing(a, device, settings, results, compile_info, warmup_request)
        log(f"wrote {a.timing_json}")
    return results


if __name__ == "__main__":
    t0 = time.perf_counter()
    run()
    print(f"done in {time.perf_counter() - t0:.1f}s")
