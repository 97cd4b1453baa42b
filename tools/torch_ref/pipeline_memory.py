"""What a TRELLIS.2 user sees of memory and time: the pipeline's denoise stages with TRELLIS.2's
own modules and samplers, PyTorch against the sparse3d drop-in, in one process, each asset
once in service order, with the device-wide memory in use polled every 2 ms.

  python3 tools/torch_ref/pipeline_memory.py --trellis2 .deps/trellis2-src --json m.json
  python3 tools/torch_ref/pipeline_memory.py --trellis2 .deps/trellis2-src --low-vram
  python3 tools/torch_ref/pipeline_memory.py --trellis2 .deps/trellis2-src --limit-gib 16
  python3 tools/torch_ref/pipeline_memory.py --trellis2 /tmp/t2 --tiny --device cpu   # a check

The models, weights, conditions, assets and samplers are pipeline_e2e.py's (its docstring says
what is synthetic and what replaces the decoders). What differs is what is measured and how the
pipeline is held, which is the user's way:

* The originals stay where the pipeline put them: with low_vram off every flow model is on
  the GPU (what `pipeline.cuda()` does), with low_vram on every one is on the CPU and each stage
  moves its model to the GPU and back. accelerate() is called on that pipeline as it is.
* Memory is device-wide: a thread reads cudaMemGetInfo every 2 ms (PyTorch's allocations and
  the engines' alike, and each one's cached blocks), and the process's resident host memory
  (/proc/self/statm) at the same time. Per stage and per asset: the highest reading minus
  nothing (the CUDA context and the resident models are in it, as a user's nvidia-smi shows).
* Sides, in order, each in a process of its own (a user's process runs the pipeline one way:
  in one process the second side would also carry the kernels the first one loaded, about
  0.1 GiB of device memory that cudaMemGetInfo counts; --one-process runs them all in this
  process, as before 2026-12-02 evening), each a fresh service (PyTorch's cache emptied, the
  drop-in's qualification cache a new empty folder): `pytorch` (TRELLIS.2's modules), `sparse3d-copy` (the drop-in as
  it was before one copy of the weights: accelerate(share_weights=False,
  release_workspace=False, share_workspace=False, fit_memory=False)), `sparse3d` (the
  drop-in's defaults), `sparse3d-nofit` (the defaults but fit_memory: every flag of the path
  kept), `sparse3d-keep` (the defaults but release_workspace: the workspaces kept between
  loops), `sparse3d-driver` (the defaults but workspace_memory="driver": the shared workspace
  from and to cudaMalloc / cudaFree, not PyTorch's caching allocator),
  `sparse3d-copy+OPT[+OPT]` (the copy with those of accelerate()'s memory options on:
  share_weights, release_workspace, share_workspace, fit_memory; one option's share of the
  time), and `SIDE@SPEC` (that side on execution path SPEC). After each drop-in side
  restore() puts the originals back, and their parameters are checked bit for bit (a checksum
  per tensor taken before the first side, and the same storage).
* Pipeline types (--types): the stages TRELLIS.2's run() takes for 512, 1024, 1024_cascade and
  1536_cascade (the 1536 cascade's 96-grid coordinates are the same implicit surface at 96^3;
  an asset above the pipeline's max_num_tokens 49,152 there is skipped, as run() would lower
  its resolution).
* --limit-gib L: one allocation of (device total - L GiB) is made before the pipeline is
  built, so that everything runs on L GiB; an asset that runs out of memory is recorded as
  such (OOM) and the next one runs.

Writes --json (everything) and --table (per type and asset: tokens, seconds and device peak
per side, speedups); prints the table last.
"""
import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipeline_e2e as e2e  # noqa: E402

GIB = float(1 << 30)
MAX_NUM_TOKENS = 49152          # Trellis2ImageTo3DPipeline.run's default
TOKENS = (3000, 7000, 12000, 20000, 31000)
WARMUP_TOKENS = 2500
TINY_TOKENS = (300, 700, 1200)
TINY_WARMUP_TOKENS = 200
SIDES = ("pytorch", "sparse3d-copy", "sparse3d", "sparse3d-nofit", "sparse3d-keep",
         "sparse3d-driver")
TYPES = ("512", "1024", "1024_cascade", "1536_cascade")


class Poller:
    """Device memory in use (cudaMemGetInfo: total - free) and host RSS, read every `period`
    seconds on a thread; peak() gives the highest readings since the last reset()."""

    def __init__(self, device, period=0.002):
        self.cuda = device.type == "cuda"
        self.device = device
        self.period = period
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.lock = threading.Lock()
        self.dev_peak = self.rss_peak = 0
        self.samples = 0
        self.stop_flag = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def read(self):
        used = 0
        if self.cuda:
            free, total = torch.cuda.mem_get_info(self.device)
            used = total - free
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * self.page
        return used, rss

    def _run(self):
        while not self.stop_flag:
            used, rss = self.read()
            with self.lock:
                self.dev_peak = max(self.dev_peak, used)
                self.rss_peak = max(self.rss_peak, rss)
                self.samples += 1
            time.sleep(self.period)

    def reset(self):
        used, rss = self.read()
        with self.lock:
            self.dev_peak, self.rss_peak, self.samples = used, rss, 0

    def peak(self):
        used, rss = self.read()      # the end of the window counts too
        with self.lock:
            return max(self.dev_peak, used), max(self.rss_peak, rss), self.samples

    def close(self):
        self.stop_flag = True
        self.thread.join()


def is_oom(e):
    text = f"{type(e).__name__}: {e}"
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in text.lower() or \
        "out of device memory" in text


def coords_at(asset, res):
    """The asset's surface at res^3 (the same implicit as its 64-grid occupancy)."""
    if res == 64:
        return asset["coords64"]
    gyroid, dist = e2e._gyroid_and_distance(res, 3.0)
    occ = e2e.crossed_cells(np.maximum(gyroid, dist - asset["radius"]) > 0)
    c = torch.argwhere(torch.from_numpy(occ)[None, None])[:, [0, 2, 3, 4]].int()
    return c


def make_assets(targets, warmup, tiny):
    out = {}
    for label, target in [("warm-up", warmup)] + [(None, t) for t in targets]:
        occ, radius, shape = e2e._gyroid_ball_voxels(target)
        c32, c64 = e2e.coords_of_occupancy(occ)
        name = label or f"n{c64.shape[0]}"
        out[name] = {"coords32": c32, "coords64": c64, "shape": shape, "radius": radius}
        out[name]["coords96"] = coords_at(out[name], 96)
    return out


# Per pipeline type: the stages run() takes, as (stage name, model key, sampler attribute,
# condition px, coordinate grid: None for the dense structure stage).
def stages_of(ptype):
    ss = ("structure", "sparse_structure_flow_model", "sparse_structure_sampler", 512, None)
    if ptype == "512":
        return [ss, ("shape", "shape_slat_flow_model_512", "shape_slat_sampler", 512, 32),
                ("texture", "tex_slat_flow_model_512", "tex_slat_sampler", 512, 32)]
    if ptype == "1024":
        return [ss, ("shape", "shape_slat_flow_model_1024", "shape_slat_sampler", 1024, 64),
                ("texture", "tex_slat_flow_model_1024", "tex_slat_sampler", 1024, 64)]
    hi = 64 if ptype == "1024_cascade" else 96
    return [ss, ("shape_512", "shape_slat_flow_model_512", "shape_slat_sampler", 512, 32),
            ("shape_hi", "shape_slat_flow_model_1024", "shape_slat_sampler", 1024, hi),
            ("texture", "tex_slat_flow_model_1024", "tex_slat_sampler", 1024, hi)]


# The drop-in's engine calls of the stage running now (record_engine_calls).
ENGINE_CALLS = []
_KEPT_STATS = ("plan", "tokens", "setup_seconds", "loop_seconds", "wall_seconds",
               "null_context_seconds", "first_use", "peak_device_bytes", "graphs_captured")


def torch_free_cache(blocks):
    """What PyTorch's caching allocator holds free on the current device as an engine call
    starts: {"bytes": reserved - allocated}, and with `blocks` also "largest_block" (its
    largest free block) and "large_blocks" (its free blocks of 2 MiB or more). A workspace on
    PyTorch's memory takes its blocks from there first; whether they fit, not the sum, decides
    if the device-wide peak grows. The blocks come from torch.cuda.memory_snapshot(), a walk
    over every segment that falls inside the stage's time, so they are opt-in (--free-blocks)."""
    if not torch.cuda.is_available():
        return None
    free = {"bytes": int(torch.cuda.memory_reserved() - torch.cuda.memory_allocated())}
    if blocks:
        largest, large = 0, 0
        for seg in torch.cuda.memory_snapshot():
            for b in seg.get("blocks", []):
                if b.get("state") == "inactive":
                    largest = max(largest, int(b["size"]))
                    large += int(b["size"]) if b["size"] >= (2 << 20) else 0
        free.update(largest_block=largest, large_blocks=large)
    return free


def record_engine_calls(s3d, sync, free_blocks=False):
    """Wraps the drop-in's one call into the engine per sampler loop (trellis2._engine_loop):
    per call, the time the pipeline waited for it (device-synchronised) beside the engine's
    own account of the request (Engine.last_request's stats: set-up, loop, first-use work by
    kind), so that what the drop-in spends outside the engine (making room, releasing the
    workspace, casting operands) is the difference."""
    original = s3d.trellis2._engine_loop

    def timed(engine, call, release_cache):
        sync()
        free = torch_free_cache(free_blocks)
        t0 = time.perf_counter()
        out = original(engine, call, release_cache)
        sync()
        seconds = time.perf_counter() - t0
        stats = (getattr(engine, "last_request", None) or {}).get("stats", {})
        kept = {k: stats[k] for k in _KEPT_STATS if k in stats}
        ENGINE_CALLS.append({"seconds": seconds, "release_cache": bool(release_cache),
                             "torch_free_cache_before": free, **kept})
        return out
    s3d.trellis2._engine_loop = timed
    return original


def run_asset(pl, ptype, asset, conds, poller, seed, sync):
    """One pipeline run of `ptype` on `asset`: {stage: {seconds, device_peak, rss_peak,
    tokens}} plus "total"; the final latents' checksums."""
    recs = {}
    shape_slat = None
    poller.reset()
    t_all = time.perf_counter()
    with torch.no_grad():
        for i, (stage, key, _, px, grid) in enumerate(stages_of(ptype)):
            coords = None if grid is None else asset[f"coords{grid}"].to(pl.device)
            sync()
            if pl.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(pl.device)
            ENGINE_CALLS.clear()
            t0 = time.perf_counter()
            if grid is None:
                out = pl.structure(conds[px], seed + 1)
                tokens = 16 ** 3
            elif stage == "texture":
                out = pl.texture(conds[px], shape_slat, seed + 4, key=key)[1]
                tokens = int(coords.shape[0])
            else:
                raw, shape_slat = pl.shape(key, conds[px], coords, seed + 2 + i)
                out = raw
                tokens = int(coords.shape[0])
            sync()
            seconds = time.perf_counter() - t0
            dev, rss, samples = poller.peak()
            feats = out.feats if hasattr(out, "feats") else out
            recs[stage] = {"seconds": seconds, "device_peak": dev, "rss_peak": rss,
                           "tokens": tokens, "samples": samples,
                           "finite": bool(torch.isfinite(feats.float()).all())}
            if pl.device.type == "cuda":
                recs[stage]["torch_peak_allocated"] = torch.cuda.max_memory_allocated(pl.device)
                recs[stage]["torch_peak_reserved"] = torch.cuda.max_memory_reserved(pl.device)
            engines = {}
            for k, m in pl.models.items():
                e = getattr(m, "_engine", None)
                if e is not None:
                    c = e.counters()
                    engines[k] = {"peak": int(c.get("peak_device_bytes", 0)),
                                  "reserved": int(c.get("device_bytes_reserved", 0)),
                                  "weights": e.residency()["weights_source"]}
            if engines:
                recs[stage]["engines"] = engines
            if ENGINE_CALLS:
                recs[stage]["engine_calls"] = list(ENGINE_CALLS)
            del out
    total = time.perf_counter() - t_all
    recs["total"] = {"seconds": sum(r["seconds"] for r in recs.values()),
                     "wall_seconds": total,
                     "device_peak": max(r["device_peak"] for r in recs.values()),
                     "rss_peak": max(r["rss_peak"] for r in recs.values())}
    return recs


def checksums(models):
    """Per parameter of every model: (data pointer, device, int64 sum of its bits)."""
    out = {}
    for key, m in models.items():
        for name, p in m.named_parameters():
            d = p.detach()
            bits = d.view(torch.int16) if d.element_size() == 2 else d.view(torch.int32)
            out[f"{key}.{name}"] = (d.data_ptr(), str(d.device), int(bits.long().sum()))
    return out


ABLATION_OPTIONS = ("share_weights", "release_workspace", "share_workspace", "fit_memory")


def side_options(side, path, s3d):
    """accelerate()'s memory options and path for a drop-in side (see the docstring's Sides):
    `sparse3d` the defaults, `sparse3d-copy` all four off, `sparse3d-nofit` fit_memory off,
    `sparse3d-keep` release_workspace off, `sparse3d-driver` the workspace's memory from the
    driver, `sparse3d-copy+OPT[+OPT]` the copy with OPTs on (an
    ablation, one memory option at a time), and any of them `@SPEC` on execution path SPEC."""
    if "@" in side:
        side, path = side.split("@", 1)
    base, *extra = side.split("+")
    on = dict.fromkeys(ABLATION_OPTIONS, base != "sparse3d-copy")
    if base == "sparse3d-nofit":
        on["fit_memory"] = False
    if base == "sparse3d-keep":
        on["release_workspace"] = False
    if base == "sparse3d-driver":
        on["workspace_memory"] = "driver"
    for opt in extra:
        on[opt] = True
    # fit_memory without a path runs the default path without CUDA graphs (accelerate() picks
    # it); nofit keeps that path, so that it differs from the defaults by the fit alone.
    if base == "sparse3d-nofit" and path is None:
        path = s3d.default_path() + "-cuda_graphs"
    return on, path


def side_refusal(side):
    """None for a side --sides takes, else why not."""
    name = side.split("@", 1)[0]
    base, *extra = name.split("+")
    if base not in SIDES or (base == "pytorch" and "@" in side):
        return f"unknown side {side!r} (choose from {SIDES}, SIDE@SPEC or sparse3d-copy+OPT)"
    if extra and base != "sparse3d-copy":
        return f"{side!r}: +OPT ablations are of sparse3d-copy only"
    bad = [o for o in extra if o not in ABLATION_OPTIONS]
    if bad or len(set(extra)) != len(extra):
        return f"{side!r}: +OPT must be distinct, of {', '.join(ABLATION_OPTIONS)}"
    return None


def run_side(side, pl, models, assets, conds, a, s3d, poller, sync, types):
    print(f"== side {side}", flush=True)
    if torch.device(a.device).type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    acc = None
    cache = None
    info = {}
    if side != "pytorch":
        cache = tempfile.mkdtemp(prefix="s3d-mem-cache-")
        options, path = side_options(side, a.path, s3d)
        engine_loop = record_engine_calls(s3d, sync, a.free_blocks)
        t0 = time.perf_counter()
        acc = s3d.trellis2.accelerate(pl, path=path, cache_dir=cache, **options)
        info["accelerate_seconds"] = time.perf_counter() - t0
    used, rss = poller.read()
    info["before_first_request"] = {"device_used": used, "rss": rss}
    runs = {}
    for ptype in types:
        for name, asset in assets.items():
            if ptype == "1536_cascade" and asset["coords96"] is not None and \
                    asset["coords96"].shape[0] > MAX_NUM_TOKENS:
                runs[f"{ptype}/{name}"] = {"skipped": f"{asset['coords96'].shape[0]} tokens at 96 "
                                           f"> max_num_tokens {MAX_NUM_TOKENS}"}
                continue
            label = f"{ptype}/{name}"
            try:
                rec = run_asset(pl, ptype, asset, conds, poller, a.seed, sync)
            except Exception as e:  # noqa: BLE001 - an OOM is a result here
                if not is_oom(e):
                    raise
                sync_quietly(a.device)
                dev, rss, _ = poller.peak()
                rec = {"oom": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                       "total": {"device_peak": dev, "rss_peak": rss}}
                gc.collect()
                if torch.device(a.device).type == "cuda":
                    torch.cuda.empty_cache()
            runs[label] = rec
            t = rec.get("total", {})
            print(f"  {label}: " + ("OOM: " + rec["oom"] if "oom" in rec else
                  f"{t['seconds']:.3f} s, device peak {t['device_peak'] / GIB:.2f} GiB, "
                  f"RSS peak {t['rss_peak'] / GIB:.2f} GiB"), flush=True)
    if acc is not None:
        info["report"] = acc.report()
        info["fallbacks"] = acc.fallbacks()
        print(acc.report(), flush=True)
        acc.restore()
        s3d.trellis2._engine_loop = engine_loop
        del acc
        gc.collect()
    if cache:
        import shutil
        shutil.rmtree(cache, ignore_errors=True)
    return {"info": info, "runs": runs}


def sync_quietly(device):
    try:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        pass


def table(result, sides, types, assets):
    lines = []
    head = f"{'type':13} {'asset':9} {'tokens':>7} " + " ".join(
        f"{s + ' s':>14}" for s in sides) + " " + " ".join(
        f"{s + ' GiB':>16}" for s in sides) + "  speedups vs PyTorch"
    lines.append(f"low_vram {'on' if result['options']['low_vram'] else 'off'}"
                 + (f", device limited to {result['options']['limit_gib']} GiB"
                    if result['options']['limit_gib'] else "")
                 + "; seconds (sum of stages) and device-wide peak per side")
    lines += [head, "-" * len(head)]
    for ptype in types:
        for name in assets:
            label = f"{ptype}/{name}"
            cells_t, cells_m, tok = [], [], ""
            secs = {}
            for s in sides:
                r = result["sides"].get(s, {}).get("runs", {}).get(label)
                if r is None:
                    cells_t.append(f"{'-':>14}")
                    cells_m.append(f"{'-':>16}")
                elif "skipped" in r:
                    cells_t.append(f"{'skipped':>14}")
                    cells_m.append(f"{'-':>16}")
                elif "oom" in r:
                    cells_t.append(f"{'OOM':>14}")
                    cells_m.append(f"{r['total']['device_peak'] / GIB:>16.2f}")
                else:
                    secs[s] = r["total"]["seconds"]
                    tok = max(v["tokens"] for k, v in r.items() if k not in ("total", "structure"))
                    cells_t.append(f"{secs[s]:>14.3f}")
                    cells_m.append(f"{r['total']['device_peak'] / GIB:>16.2f}")
            sp = []
            for s in [x for x in sides if x != "pytorch"]:
                if "pytorch" in secs and s in secs:
                    sp.append(f"{secs['pytorch'] / secs[s]:.2f}x")
            lines.append(f"{ptype:13} {name:9} {str(tok):>7} " + " ".join(cells_t) + " "
                         + " ".join(cells_m) + "  " + " / ".join(sp))
    return "\n".join(lines)


def run_isolated(a):
    """Each side in a child process of its own (this script with --sides SIDE), one after the
    other; their JSONs merged into one result as the one-process run writes it."""
    import subprocess
    t_start = time.perf_counter()
    merged = None
    problems = []
    with tempfile.TemporaryDirectory(prefix="s3d-mem-sides-") as tmp:
        for i, side in enumerate(a.sides):
            child_json = os.path.join(tmp, f"side_{i}.json")
            argv = [sys.executable, os.path.abspath(__file__), "--trellis2", a.trellis2,
                    "--device", a.device, "--types", *a.types, "--sides", side,
                    "--seed", str(a.seed), "--json", child_json]
            argv += ["--tiny"] if a.tiny else []
            argv += ["--low-vram"] if a.low_vram else []
            argv += ["--tokens", *map(str, a.tokens)] if a.tokens else []
            argv += ["--warmup-tokens", str(a.warmup_tokens)] if a.warmup_tokens else []
            argv += ["--limit-gib", str(a.limit_gib)] if a.limit_gib else []
            argv += ["--path", a.path] if a.path else []
            argv += ["--free-blocks"] if a.free_blocks else []
            print(f"== side {side}: a process of its own", flush=True)
            rc = subprocess.call(argv)
            if not os.path.exists(child_json):
                problems.append(f"{side}: the child process wrote no result (exit {rc})")
                continue
            with open(child_json) as f:
                part = json.load(f)
            if rc != 0:
                problems.append(f"{side}: the child process exited {rc}")
            if merged is None:
                merged = dict(part)
                merged["options"] = vars(a)
                merged["sides"], merged["restore_checks"], merged["after_build"] = {}, {}, {}
            merged["sides"].update(part.get("sides", {}))
            merged["restore_checks"].update(part.get("restore_checks", {}))
            merged["after_build"][side] = part.get("after_build")
            problems += part.get("problems", [])
            e2e.write_outputs(a.json, None, merged)
    if merged is None:
        print("no side produced a result")
        return 1
    return finish(merged, a, [s for s in a.sides if s in merged["sides"]],
                  list(merged["assets"]), problems, t_start, " (a process per side)")


def finish(result, a, sides, assets, problems, t_start, how=""):
    """The run's end, either way: its problems, seconds and table into the JSON and the
    table file, a summary and the table printed; the exit status."""
    result["problems"] = problems
    result["total_seconds"] = time.perf_counter() - t_start
    text = table(result, sides, a.types, assets)
    result["table"] = text
    e2e.write_outputs(a.json, a.table, result, text)
    print(f"\nwhole run {result['total_seconds']:.1f} s{how}; restore() checks: "
          f"{result['restore_checks']}")
    for line in problems:
        print("!! " + line)
    print(text)
    return 1 if problems else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trellis2", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--low-vram", action="store_true")
    p.add_argument("--types", nargs="+", choices=TYPES, default=["1024"])
    p.add_argument("--tokens", type=int, nargs="+", default=None,
                   help=f"64-grid token counts of the assets (default {' '.join(map(str, TOKENS))})")
    p.add_argument("--warmup-tokens", type=int, default=None)
    p.add_argument("--sides", nargs="+", default=list(SIDES[:3]),
                   help=f"of {', '.join(SIDES)}; SIDE@SPEC: that side on path SPEC; "
                        "sparse3d-copy+OPT[+OPT]: the copy with those of "
                        f"{', '.join(ABLATION_OPTIONS)} on")
    p.add_argument("--limit-gib", type=float, default=0.0)
    p.add_argument("--path", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--table", default=None)
    p.add_argument("--free-blocks", action="store_true",
                   help="record PyTorch's free blocks at each engine call (memory_snapshot(), "
                        "inside the stage's time; the free bytes are always recorded)")
    p.add_argument("--one-process", action="store_true",
                   help="run every side in this process (default: one child process per side)")
    a = p.parse_args()
    bad = [why for why in map(side_refusal, a.sides) if why]
    if bad:
        raise SystemExit("--sides: " + "; ".join(bad))
    if len(a.sides) > 1 and not a.one_process:
        return run_isolated(a)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    t_start = time.perf_counter()
    poller = Poller(device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    blocker = None
    if a.limit_gib:
        if not cuda:
            raise SystemExit("--limit-gib needs --device cuda")
        free, total = torch.cuda.mem_get_info(device)
        hold = total - int(a.limit_gib * GIB)
        used = total - free
        blocker = torch.empty(max(0, hold - used), dtype=torch.uint8, device=device)
        print(f"holding {blocker.numel() / GIB:.2f} GiB: {a.limit_gib} GiB of "
              f"{total / GIB:.1f} GiB left for the pipeline (context included)", flush=True)

    e2e.install_stand_ins(os.path.abspath(a.trellis2))
    orig = e2e.import_original()
    configs = e2e.model_configs(a.trellis2, a.tiny, 64)
    s3d = None
    if any(s != "pytorch" for s in a.sides):
        s3d, why = e2e.import_sparse3d()
        if s3d is None:
            raise SystemExit(f"sparse3d is not importable: {why}")
    tokens = a.tokens or list(TINY_TOKENS if a.tiny else TOKENS)
    warm = a.warmup_tokens or (TINY_WARMUP_TOKENS if a.tiny else WARMUP_TOKENS)
    assets = make_assets(tokens, warm, a.tiny)
    for name, asset in assets.items():
        n96 = "-" if asset["coords96"] is None else asset["coords96"].shape[0]
        print(f"asset {name}: {asset['coords32'].shape[0]} tokens at 32, "
              f"{asset['coords64'].shape[0]} at 64, {n96} at 96", flush=True)
    cond_channels = e2e.TINY_OVERRIDES["cond_channels"] if a.tiny else e2e.COND_CHANNELS
    conds = {}
    for px, seed in ((512, 11), (1024, 12)):
        g = torch.Generator().manual_seed(a.seed * 100 + seed)
        n = (e2e.TINY_COND_TOKENS if a.tiny else e2e.COND_TOKENS)[px]
        c = F.layer_norm(torch.randn(1, n, cond_channels, generator=g), (cond_channels,),
                         eps=1e-6).to(device)
        conds[px] = {"cond": c, "neg_cond": torch.zeros_like(c)}
    models = {}
    for i, (key, config) in enumerate(configs.items()):
        models[key] = e2e.build_model(orig, config, a.seed * 100 + i, device,
                                      keep_on_cpu=a.low_vram)
    pl = e2e.StagePipeline(orig, models, device, a.low_vram, True, a.seed)
    sync()
    used, rss = poller.read()
    print(f"models built: device {used / GIB:.2f} GiB in use, RSS {rss / GIB:.2f} GiB", flush=True)
    result = {
        "what": "TRELLIS.2 denoise stages, device-wide memory and time, PyTorch vs the drop-in",
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                        "sparse3d": getattr(s3d, "__version__", None)},
        "options": vars(a), "after_build": {"device_used": used, "rss": rss},
        "assets": {k: {"tokens32": int(v["coords32"].shape[0]),
                       "tokens64": int(v["coords64"].shape[0]),
                       "tokens96": None if v["coords96"] is None else int(v["coords96"].shape[0]),
                       "shape": v["shape"]} for k, v in assets.items()},
        "sides": {}, "restore_checks": {},
    }
    problems = []
    for side in a.sides:
        # Before each drop-in side (the PyTorch side's low_vram moves re-allocate the
        # parameters): restore() must give back these very tensors with these bits.
        before = checksums(models) if side != "pytorch" else None
        result["sides"][side] = run_side(side, pl, models, assets, conds, a, s3d, poller, sync,
                                         a.types)
        if side != "pytorch":
            after = checksums(pl.models)
            same = after == before and all(pl.models[k] is models[k] for k in models)
            result["restore_checks"][side] = same
            if not same:
                bad = [k for k in before if after.get(k) != before[k]][:5]
                problems.append(f"{side}: after restore() the originals differ: {bad}")
        # What is done so far, in case a later side runs past the call's limit.
        e2e.write_outputs(a.json, None, result)
    poller.close()
    del blocker
    return finish(result, a, a.sides, assets, problems, t_start)


if __name__ == "__main__":
    sys.exit(main())
