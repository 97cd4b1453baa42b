"""python -m sparse3d_engine: the package's command line, from the installed wheel alone (no
build tree, no `sparse3d` binary).

    python -m sparse3d_engine info [--json]
    python -m sparse3d_engine make-checkpoint --preset tiny --seed 0 --out ckpts/tiny [--dtype f32]
    python -m sparse3d_engine run --checkpoint ckpts/tiny.json [--inputs FILE.safetensors]
        [--tokens N] [--seed S] [--path P] [--steps N] [--out DIR]

`run` denoises one request: the tensors of an inputs file (coords, cond, concat_cond, noise:
the layout `sparse3d run --inputs` reads), or without --inputs a synthetic one drawn with
NumPy (N distinct voxels of the model's grid, a normal condition). It prints the timing and
the latent's statistics and, with --out, writes OUT/NAME.safetensors (latent, coords) or
OUT/NAME.npy. Errors are one line, "sparse3d_engine: error: ...", and exit status 1.
"""
from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

# The console script is `sparse3d-engine`; `python -m sparse3d_engine` runs the same.
PROG = ("sparse3d-engine" if os.path.basename(sys.argv[0] or "") == "sparse3d-engine"
        else "python -m sparse3d_engine")


def printable(text: str) -> str:
    """`text` with its control characters (below 0x20, and 0x7f) written as \\xNN, as the C++
    command writes them: a value echoed in an error line can neither break the line nor drive
    the terminal."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)


class _Parser(argparse.ArgumentParser):
    """argparse with the C++ command line's manners: a misspelt command or option gets a
    suggestion, and what it echoes is escaped."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        choice = re.search(r"invalid choice: '((?:[^'\\]|\\.)*)' \(choose from (.*)\)", message)
        if choice:
            options = [c.strip().strip("'") for c in choice.group(2).split(",")]
            close = difflib.get_close_matches(choice.group(1), options, n=1)
            if close:
                message += f"; did you mean '{close[0]}'?"
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            known: List[str] = [o for a in _all_actions(self) for o in a.option_strings]
            for word in unknown.group(1).split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if word.startswith("-") and close:
                    message += f"; did you mean {close[0]}?"
                    break
        super().error(printable(message))


def integer_in(low: int, high: int):
    """An argparse type: a decimal integer in [low, high], refused by the option's name (a
    usage error, exit 2) before anything runs, as the C++ command's numeric options are."""
    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
            raise argparse.ArgumentTypeError(f"'{printable(text)}' is not an integer in "
                                             f"decimal digits (expected one in [{low}, {high}])")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"'{printable(text)}' is outside [{low}, {high}]")
        return value
    parse.__name__ = "integer"
    return parse


def _all_actions(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    """Every option of `parser` and of its subcommands."""
    out = list(parser._actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out += sub._actions
    return out
# The names an inputs file may hold (sparse3d run --inputs reads the same).
INPUT_NAMES = ("coords", "cond", "concat_cond", "noise")


class UsageError(Exception):
    """A mistake in the command's inputs: one line, exit status 1."""


# ---- info -------------------------------------------------------------------------------------

def cmd_info(args: argparse.Namespace) -> int:
    import sparse3d_engine as s3d
    info = s3d.build_info()
    info["paths"] = [p["name"] for p in s3d.paths()]
    info["environment"] = json.loads(s3d._native.environment_json())
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    cuda = info["cuda_built"]
    print(f"sparse3d_engine {info['version']}")
    print(f"  native module   {info['native_module']}")
    print(f"  built for CUDA  {cuda.get('version') or cuda.get('major')}")
    print(f"  python          {info['python']} ({info['platform']})")
    env = info["environment"]
    if env.get("has_gpu"):
        print(f"  GPU             {env['gpu_name']} (compute capability "
              f"{env['compute_capability']}, {env['sm_count']} SMs, "
              f"{env['gpu_memory_bytes'] / 2**30:.0f} GiB), driver {env['nvidia_driver']}")
    else:
        print("  GPU             none (CPU backend)")
    for name, version in info["packages"].items():
        print(f"  {name:<15} {version or 'not installed'}")
    print(f"  default path    {info['default_path']} (paths: {', '.join(info['paths'])})")
    print("CUDA libraries:")
    if not info["libraries"]:
        print("  none loaded")
    for lib in info["libraries"]:
        version = lib.get("version") or "version unknown"
        where = lib.get("path") or "not found"
        source = f" ({lib['source']})" if lib.get("source") else ""
        floor = ""
        if lib.get("ok") is False:
            floor = f"  OLDER than {lib.get('floor')}, the oldest this build works with"
        print(f"  {lib.get('soname') or lib.get('name')}: {version} from {where}{source}{floor}")
    return 0


# ---- make-checkpoint ----------------------------------------------------------------------------

def cmd_make_checkpoint(args: argparse.Namespace) -> int:
    import sparse3d_engine as s3d
    t0 = time.perf_counter()
    c = s3d.make_synthetic_checkpoint(args.out, preset=args.preset, seed=args.seed,
                                      dtype=args.dtype)
    print(f"wrote {c['json']} and {c['safetensors']} ({args.preset}, {c['family']}, "
          f"{c['parameters']} parameters, {args.dtype}, seed {args.seed}) in "
          f"{time.perf_counter() - t0:.2f} s")
    return 0


# ---- run --------------------------------------------------------------------------------------

def read_inputs(path: str) -> Dict[str, np.ndarray]:
    """An inputs file's tensors, checked as far as the model is not needed: known names, the
    dtypes and ranks of each, and shapes that agree with each other; cond [L, C] becomes
    [1, L, C]. BF16 is read as float32 exactly (the engine rounds cond to bf16 itself, so the
    latent is the one a bf16 cond gives)."""
    from . import _safetensors
    what = f"inputs {path}"
    try:
        header, _, start = _safetensors.read_header(path)
    except (OSError, _safetensors.SafetensorsError) as e:
        raise UsageError(f"{what}: {e}") from e
    unknown = sorted(set(header) - set(INPUT_NAMES))
    if unknown:
        raise UsageError(f"{what}: unexpected tensor(s) {', '.join(unknown)} (an inputs file "
                         f"holds {', '.join(INPUT_NAMES)})")
    if "cond" not in header:
        raise UsageError(f"{what}: has no 'cond' tensor (the image condition, f32 or bf16 "
                         f"[L, C] or [B, L, C])")
    rules = {"coords": (("I32",), (2,), "[N, 4]"),
             "cond": (("F32", "BF16"), (2, 3), "[L, C] or [B, L, C]"),
             "concat_cond": (("F32", "BF16"), (2,), "[N, Cc]"),
             "noise": (("F32", "BF16"), (2, 5), "[N, C_out] or the volume [B, C_out, R, R, R]")}
    for name, entry in header.items():
        dtypes, ranks, layout = rules[name]
        if entry["dtype"] not in dtypes:
            raise UsageError(f"{what}: '{name}' has dtype {entry['dtype']}, expected "
                             f"{' or '.join(dtypes)}")
        if len(entry["shape"]) not in ranks or 0 in entry["shape"]:
            raise UsageError(f"{what}: '{name}' has shape {entry['shape']}, expected {layout}")
    t = {name: _safetensors.load(path, entry, start) for name, entry in header.items()}
    if t["cond"].ndim == 2:
        t["cond"] = t["cond"][None]
    batch = t["cond"].shape[0]
    coords = t.get("coords")
    if coords is not None and coords.shape[1] != 4:
        raise UsageError(f"{what}: 'coords' has shape {list(coords.shape)}, expected [N, 4] "
                         f"rows (batch, x, y, z)")
    if "concat_cond" in t:
        if coords is None:
            raise UsageError(f"{what}: has 'concat_cond' but no 'coords' (concat_cond is a "
                             f"texture model's per-token shape latent, [N, Cc])")
        if t["concat_cond"].shape[0] != coords.shape[0]:
            raise UsageError(f"{what}: 'concat_cond' has shape {list(t['concat_cond'].shape)}, "
                             f"expected [{coords.shape[0]}, Cc] (one row per coords row)")
    noise = t.get("noise")
    if noise is not None:
        if coords is not None and (noise.ndim != 2 or noise.shape[0] != coords.shape[0]):
            raise UsageError(f"{what}: 'noise' has shape {list(noise.shape)}, expected "
                             f"[{coords.shape[0]}, C_out] (one row per coords row)")
        if coords is None and (noise.ndim != 5 or noise.shape[0] != batch):
            raise UsageError(f"{what}: 'noise' has shape {list(noise.shape)}, expected the "
                             f"volume [{batch}, C_out, R, R, R] (no coords: the dense model)")
    for name, a in t.items():
        if a.dtype == np.float32 and not np.isfinite(a).all():
            raise UsageError(f"{what}: '{name}' has a non-finite value")
    return t


def synthetic_request(model: Dict[str, Any], tokens: int, cond_tokens: int,
                      seed: int) -> Dict[str, np.ndarray]:
    """A request drawn with NumPy from `seed`: `tokens` distinct voxels of the model's grid in
    raster order (none for a grid-layout model, whose tokens are its whole grid), a normal
    condition [1, cond_tokens, C] and, for a texture model, a normal concat_cond."""
    rng = np.random.default_rng(seed)
    t: Dict[str, np.ndarray] = {}
    if model["layout"] != "grid":
        r = int(model["resolution"])
        if not 1 <= tokens <= r ** 3:
            raise UsageError(f"--tokens {tokens}: the model's grid has {r}^3 = {r ** 3} voxels")
        flat = np.sort(rng.choice(r ** 3, size=tokens, replace=False))
        xyz = np.stack(np.unravel_index(flat, (r, r, r)), axis=1)
        t["coords"] = np.ascontiguousarray(
            np.concatenate([np.zeros((tokens, 1), np.int64), xyz], axis=1).astype(np.int32))
    t["cond"] = rng.standard_normal((1, cond_tokens, int(model["cond_channels"]))).astype(np.float32)
    concat = int(model["in_channels"]) - int(model["out_channels"])
    if concat > 0:
        t["concat_cond"] = rng.standard_normal((tokens, concat)).astype(np.float32)
    return t


def _stats(latent: np.ndarray) -> Dict[str, Any]:
    finite = np.isfinite(latent)
    values = latent[finite]
    return {"shape": list(latent.shape), "non_finite": int(latent.size - finite.sum()),
            "mean": float(values.mean()) if values.size else float("nan"),
            "std": float(values.std()) if values.size else float("nan"),
            "min": float(values.min()) if values.size else float("nan"),
            "max": float(values.max()) if values.size else float("nan")}


def cmd_run(args: argparse.Namespace) -> int:
    import sparse3d_engine as s3d
    request = read_inputs(args.inputs) if args.inputs else None
    name = os.path.splitext(os.path.basename(args.inputs))[0] if args.inputs else "synthetic"
    target = None
    if args.out:
        # Checked now, created only when there is a latent to write (a failed run leaves no
        # new folder).
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"--out {args.out} exists and is not a folder")
        target = os.path.join(args.out, f"{name}.{args.format}")
        if args.inputs and os.path.exists(target) and os.path.samefile(target, args.inputs):
            raise UsageError(f"--out {args.out}: {target} is the inputs file itself, which "
                             f"the result would overwrite; choose another folder")

    t0 = time.perf_counter()
    engine = s3d.Engine(args.checkpoint, path=args.path or "", device=args.device,
                        cache_dir=args.cache_dir or "",
                        persist_qualification=not args.no_qualification_cache,
                        log=print if args.verbose else None)
    m = engine.model
    print(f"loaded {args.checkpoint} ({m['family']}, {m['parameters']} parameters) on "
          f"{engine.device} in {time.perf_counter() - t0:.3f} s")
    if request is None:
        request = synthetic_request(m, args.tokens, args.cond_tokens, args.seed)
    coords = request.get("coords")
    grid = m["layout"] == "grid"
    if grid and coords is not None:
        raise UsageError(f"{args.inputs}: has 'coords', but {args.checkpoint} is a {m['family']}, "
                         f"whose tokens are its whole grid: leave coords out")
    if not grid and coords is None:
        raise UsageError(f"{args.inputs}: has no 'coords' tensor (int32 [N, 4]), which a "
                         f"{m['family']} needs")

    sampler = s3d._sampler(args.sampler, engine.sampler_preset)
    if args.steps is not None:
        sampler.steps = args.steps
    noise = request.get("noise")
    print(f"path {engine.plan if args.path is None else args.path}; sampler: {sampler.steps} "
          f"steps, rescale_t {sampler.rescale_t:g}, cfg {sampler.guidance:g} on t in "
          f"[{sampler.guidance_interval[0]:g}, {sampler.guidance_interval[1]:g}], rescale "
          f"{sampler.guidance_rescale:g}; noise "
          f"{'from the inputs' if noise is not None else f'from seed {args.seed}'}")
    t1 = time.perf_counter()
    latent = engine.sample(coords, request["cond"], noise=noise,
                           seed=None if noise is not None else args.seed,
                           concat_cond=request.get("concat_cond"), sampler=sampler,
                           path=args.path,
                           progress=not args.no_progress and s3d._pipeline_progress())
    wall = time.perf_counter() - t1
    latent = np.asarray(latent)
    assert engine.last_request is not None
    st = engine.last_request["stats"]
    stats = _stats(latent)
    tokens = st["tokens"]
    print(f"[{name}] {tokens} tokens, path {st['plan']}: set-up {st['setup_seconds']:.3f} s + "
          f"denoise loop {st['loop_seconds']:.3f} s, whole call {wall:.3f} s, "
          f"{st['launches']} launches")
    print(f"[{name}] latent {stats['shape']}: mean {stats['mean']:.6g}, std {stats['std']:.6g}, "
          f"min {stats['min']:.6g}, max {stats['max']:.6g}, {stats['non_finite']} non-finite")
    fallbacks = engine.counters()["fallbacks"]
    print("fallbacks:")
    for f in fallbacks:
        print(f"  {f['optimization']}: {f['reason']} ({f['count']}x)")
    if not fallbacks:
        print("  none")
    if stats["non_finite"]:
        print(f"[{name}] {stats['non_finite']} non-finite outputs: "
              f"{target or 'the latent'} not written")
        return 1
    if target is not None:
        created = not os.path.isdir(args.out)
        os.makedirs(args.out, exist_ok=True)
        try:
            _write_result(target, args, latent, coords, sampler, st, noise)
        except BaseException:
            if created:
                try:
                    os.rmdir(args.out)   # only when empty: what this run made
                except OSError:
                    pass
            raise
        print(f"[{name}] wrote {target}")
    if args.json:
        print(json.dumps({"name": name, "stats": st, "latent": stats, "out": target,
                          "fallbacks": fallbacks}))
    return 0


def _write_result(target: str, args: argparse.Namespace, latent: np.ndarray,
                  coords: Optional[np.ndarray], sampler: Any, st: Dict[str, Any],
                  noise: Optional[np.ndarray]) -> None:
    """The latent at `target`, atomically (_safetensors.write_atomic: no partial file, no
    write through a planted link)."""
    from . import _safetensors
    if args.format == "npy":
        _safetensors.write_atomic(target, lambda f: np.save(f, latent))
        return
    tensors = {"latent": latent}
    if coords is not None:
        tensors["coords"] = coords
    metadata = {"steps": str(sampler.steps), "path": st["plan"],
                "generator": "python -m sparse3d_engine run"}
    metadata.update({"inputs": args.inputs} if args.inputs else
                    {"tokens": str(args.tokens), "cond_tokens": str(args.cond_tokens)})
    if noise is None:
        metadata["seed"] = str(args.seed)
    _safetensors.write(target, tensors, metadata)


# ---- The parser -------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="sparse3d_engine: TRELLIS.2's flow "
                "transformers on the sparse3d engine (docs/PYTHON.md).")
    p.add_argument("--version", action="version", version=f"sparse3d_engine {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True,
                           parser_class=_Parser)

    info = sub.add_parser("info", help="Versions, build, and the CUDA libraries loaded")
    info.add_argument("--json", action="store_true", help="As one JSON object")
    info.set_defaults(fn=cmd_info)

    make = sub.add_parser("make-checkpoint",
                          help="Write OUT.json + OUT.safetensors with synthetic weights")
    make.add_argument("--preset", default="tiny",
                      help="tiny | tiny-ss | trellis2-shape-1024 | trellis2-tex-1024 | "
                           "trellis2-ss-16 (default: tiny)")
    make.add_argument("--seed", type=integer_in(0, 2**64 - 1), default=0,
                      help="Weight seed (default: 0)")
    make.add_argument("--out", required=True, help="Output prefix DIR/NAME")
    make.add_argument("--dtype", choices=("bf16", "f32"), default="bf16",
                      help="Stored dtype: bf16 (as released, the default) or f32")
    make.set_defaults(fn=cmd_make_checkpoint)

    run = sub.add_parser("run", help="Denoise one request (an inputs file, or a synthetic one)")
    run.add_argument("--checkpoint", required=True, help="NAME.json (NAME.safetensors beside it)")
    run.add_argument("--inputs", help="A safetensors file of one request: coords i32 [N, 4], "
                     "cond f32/bf16 [L, C] or [B, L, C], optional concat_cond [N, Cc] and "
                     "noise ([N, C_out], or [B, C_out, R, R, R] for the dense model)")
    run.add_argument("--tokens", type=integer_in(1, 1 << 24), default=1024,
                     help="Without --inputs: voxels of the synthetic asset (default: 1024)")
    run.add_argument("--cond-tokens", type=integer_in(1, 1 << 16), default=64,
                     help="Without --inputs: condition tokens L (default: 64)")
    run.add_argument("--seed", type=integer_in(0, 2**64 - 1), default=0,
                     help="The noise seed (the engine's generator) when the request brings "
                          "no noise, and the synthetic request's (default: 0)")
    run.add_argument("--path", help="Execution path, with +flag/-flag edits (default: the "
                     "engine's, the fastest whose contracts hold)")
    run.add_argument("--sampler", default=None,
                     choices=("released", "released_sparse_structure", "protocol"),
                     help="Sampler preset (default: the model family's released settings)")
    run.add_argument("--steps", type=integer_in(1, 10000),
                     help="Euler steps (overrides the preset)")
    run.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    run.add_argument("--cache-dir", help="Qualification cache folder")
    run.add_argument("--no-qualification-cache", action="store_true",
                     help="Qualify in memory only")
    run.add_argument("--out", help="Folder for NAME.safetensors (or .npy): NAME is the inputs "
                     "file's name, or 'synthetic'")
    run.add_argument("--format", choices=("safetensors", "npy"), default="safetensors",
                     help="Output format (default: safetensors, with the latent and coords)")
    run.add_argument("--no-progress", action="store_true",
                     help="No tqdm progress bar (shown where stderr is a terminal)")
    run.add_argument("--json", action="store_true",
                     help="Also print the request's stats as one JSON line")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="Print the engine's start-up lines")
    run.set_defaults(fn=cmd_run)
    return p


def _version() -> str:
    """The package's version, as its native module gives it (the one this command runs)."""
    try:
        import sparse3d_engine as s3d
    except ImportError as e:
        return f"unknown (the package does not import: {printable(str(e))})"
    return s3d.__version__


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    # The engine's messages (fallbacks) and the loader's warnings, as lines on stderr.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        import sparse3d_engine as s3d
    except ImportError as e:
        print(f"sparse3d_engine: error: {printable(str(e))}", file=sys.stderr)
        return 1
    try:
        return int(args.fn(args) or 0)
    except (UsageError, s3d.Error, OSError) as e:
        print(f"sparse3d_engine: error: {printable(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: sample() stopped after the step in progress; results are written only after
        # it, under temporary names, so nothing partial is left. Then, as the `sparse3d`
        # command does, the process ends by the signal (the shell sees SIGINT), in one line.
        print("sparse3d_engine: interrupted", file=sys.stderr)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130  # where the signal does not end the process


if __name__ == "__main__":
    sys.exit(main())
