"""torch.compile through the engine's custom ops, on whatever device is given, against the
same calls made directly on the Engine:

    python3 tools/torch_compile_check.py --checkpoint tiny.json [--device cuda] [--tokens 777]
        [--backend inductor] [--json OUT.json]

A module whose forward calls the engine twice (a denoiser call, then the whole sampler) with
torch ops around them is compiled with fullgraph=True (a graph break is an error then), and
torch._dynamo.explain counts graphs and breaks. Each result must be bit for bit the direct
Engine call's (the op calls the same engine on the same inputs). Prints one line per check
and exits 1 on any failure."""
import argparse
import json
import sys
import time

import numpy as np
import torch

import sparse3d_engine as s3d
from sparse3d_engine import torch_ops


def request(tokens, cond_tokens, cond_channels, res, seed, device):
    rng = np.random.default_rng(seed)
    flat = np.sort(rng.choice(res ** 3, size=tokens, replace=False))
    xyz = np.stack(np.unravel_index(flat, (res, res, res)), axis=1)
    coords = np.concatenate([np.zeros((tokens, 1)), xyz], axis=1).astype(np.int32)
    cond = rng.standard_normal((1, cond_tokens, cond_channels)).astype(np.float32)
    return torch.from_numpy(coords).to(device), torch.from_numpy(cond).to(device)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=777)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--json")
    a = p.parse_args()

    with open(a.checkpoint) as f:
        args = json.load(f)["args"]
    engine = s3d.Engine(a.checkpoint, device=a.device, cache_dir="")
    coords, cond = request(a.tokens, 17, args["cond_channels"], args["resolution"], 7, a.device)
    out_ch = args["out_channels"]
    noise = torch.randn(a.tokens, out_ch, generator=torch.Generator().manual_seed(3)).to(a.device)
    spec = s3d.SamplerSettings(steps=a.steps)   # the released settings, fewer steps

    class Pipeline(torch.nn.Module):
        def forward(self, x, cond, coords, noise):
            v = torch_ops.forward(engine, x * 1.0, 500.0, cond, coords=coords)
            latent = torch_ops.sample(engine, coords, cond, noise=noise, sampler=spec)
            return v + 0.0, latent * 1.0

    x = noise.clone()
    checks, ok = [], True

    def check(name, good, detail=""):
        nonlocal ok
        ok &= bool(good)
        checks.append({"check": name, "ok": bool(good), "detail": detail})
        print(f"{'ok  ' if good else 'FAIL'} {name} {detail}", flush=True)

    with torch.no_grad():
        t0 = time.perf_counter()
        # The engine answers in the inputs' framework: torch tensors, views of its memory.
        v_ref = engine.forward(x, 500.0, cond, coords=coords).clone()
        lat_ref = engine.sample(coords, cond, noise=noise, sampler=spec).clone()
        direct_s = time.perf_counter() - t0

        explanation = torch._dynamo.explain(Pipeline())(x, cond, coords, noise)
        check("dynamo: one graph, no break", explanation.graph_count == 1 and
              explanation.graph_break_count == 0,
              f"graphs {explanation.graph_count}, breaks {explanation.graph_break_count}")
        torch._dynamo.reset()
        compiled = torch.compile(Pipeline(), fullgraph=True, backend=a.backend)
        t0 = time.perf_counter()
        v, lat = compiled(x, cond, coords, noise)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        v2, lat2 = compiled(x, cond, coords, noise)
        if a.device == "cuda":
            torch.cuda.synchronize()
        second_s = time.perf_counter() - t0
        check("forward through the compiled op: same bits", torch.equal(v, v_ref),
              f"shape {tuple(v.shape)} {v.dtype} on {v.device}")
        check("sample through the compiled op: same bits", torch.equal(lat, lat_ref),
              f"shape {tuple(lat.shape)}")
        check("second compiled call: same bits", torch.equal(v2, v_ref) and torch.equal(lat2, lat_ref))
    result = {"device": a.device, "backend": a.backend, "torch": torch.__version__,
              "sparse3d_engine": s3d.__version__, "tokens": a.tokens, "steps": a.steps,
              "direct_seconds": direct_s, "compiled_first_seconds": first_s,
              "compiled_second_seconds": second_s, "checks": checks, "ok": ok,
              "libraries": s3d._loader.libraries()}
    print(f"torch {torch.__version__} {a.backend} on {a.device}: direct {direct_s:.3f} s, "
          f"compiled first call {first_s:.2f} s, second {second_s:.3f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
