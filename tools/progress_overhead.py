"""Wall time of Engine.sample() with the progress bar off and on, in the same process.

  python3 tools/progress_overhead.py CHECKPOINT.json [--tokens 3664,30227] [--repeats 5]
                                     [--steps 12] [--out RESULT.json]

The bar is fed by the engine's progress report (the steps the device has finished; the host
stays one step ahead), so it should cost nothing measurable; this measures that on a GPU.
Each token count: one untimed request (start-up, graphs), then `repeats` rounds of off and
on, alternating which goes first; reports the median seconds of each and their ratio.
tqdm draws the bar where it is installed; otherwise a stand-in bar that counts updates (the
engine's side of the cost is the same). Synthetic inputs: distinct voxels of a 64^3 grid,
a random condition of the model's width."""
import argparse
import json
import statistics
import sys
import time

import numpy as np

import compact_json  # tools/ (this script's folder): the bench results' JSON layout

import sparse3d_engine as s3d


class _CountingBar:
    def __init__(self, total=None, desc=None, **_):
        self.total, self.n = total, 0

    def update(self, n=1):
        self.n += n

    def close(self):
        pass


def _inputs(tokens, cond_tokens, cond_channels, res, seed):
    rng = np.random.default_rng(seed)
    flat = np.sort(rng.choice(res ** 3, size=tokens, replace=False))
    xyz = np.stack(np.unravel_index(flat, (res, res, res)), axis=1)
    coords = np.concatenate([np.zeros((tokens, 1)), xyz], axis=1).astype(np.int32)
    cond = rng.standard_normal((1, cond_tokens, cond_channels)).astype(np.float32)
    return np.ascontiguousarray(coords), cond


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--tokens", default="3664,30227")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        import tqdm  # noqa: F401
        bar = "tqdm"
    except ImportError:
        sys.modules["tqdm"] = type(sys)("tqdm")
        sys.modules["tqdm"].tqdm = _CountingBar
        sys.modules["tqdm.auto"] = sys.modules["tqdm"]
        bar = "stand-in (tqdm not installed)"
    engine = s3d.Engine(a.checkpoint, device=a.device)
    m = engine.model
    sampler = s3d.SamplerSettings(steps=a.steps)
    rows = []
    for tokens in [int(t) for t in a.tokens.split(",")]:
        res = 64 if tokens <= 64 ** 3 // 2 else 128
        coords, cond = _inputs(tokens, 1029 if m["cond_channels"] > 64 else 9,
                               int(m["cond_channels"]), res, tokens)

        def run(progress):
            t0 = time.perf_counter()
            engine.sample(coords, cond, seed=1, sampler=sampler, progress=progress)
            return time.perf_counter() - t0

        run(False)  # start-up, graphs, qualification
        times = {False: [], True: []}
        for r in range(a.repeats):
            for progress in ((False, True) if r % 2 == 0 else (True, False)):
                times[progress].append(run(progress))
        off, on = statistics.median(times[False]), statistics.median(times[True])
        rows.append({"tokens": tokens, "off_s": off, "on_s": on, "on_over_off": on / off,
                     "off_all": times[False], "on_all": times[True]})
    doc = {"checkpoint": a.checkpoint, "path": engine.plan, "steps": a.steps, "bar": bar,
           "repeats": a.repeats, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            compact_json.dump(doc, f)
    print(f"bar: {bar}; path {engine.plan}; {a.steps} steps; median of {a.repeats}")
    print("| tokens | bar off, s | bar on, s | on / off |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tokens']:,} | {r['off_s']:.3f} | {r['on_s']:.3f} | {r['on_over_off']:.3f} |")


if __name__ == "__main__":
    main()
