"""Golden outputs for the C++ test suite: runs the oracle (normally on the GPU) for a fixed
set of sampler settings and writes, into one self-contained folder,

  DIR/inputs/          copies of the checkpoint (NAME.json + NAME.safetensors), the
                       manifest and its asset files
  DIR/<case>/<asset>.safetensors
                       latent after the last step, coords, and the first-step dumps
                       x_T, v_cond and (when CFG ran at t = 1) v_uncond
  DIR/golden.json      the settings of every case, file hashes and the environment

  python3 tools/torch_ref/make_golden.py --checkpoint ckpt/tiny.json \
      --manifest payloads/tiny/manifest.json --out tests/data/golden --device cuda
  python3 tools/torch_ref/make_golden.py --tiny --out tests/data/golden --device cuda
      (--tiny: make the inputs with fixtures.py instead of reading them)
  python3 tools/torch_ref/make_golden.py --preset tiny-ss --out tests/data/golden-ss --device cuda
      (--preset NAME: the same with any fixtures.py preset; tiny-ss is the dense
      sparse-structure model, two assets of the full 8^3 grid)

A dense checkpoint (SparseStructureFlowModel) runs through the same cases: its assets are
full grids, its outputs tokens in raster order, its guidance rescale the unbiased std.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import io_formats  # noqa: E402
import run as run_cli  # noqa: E402
from sampler import SamplerSettings  # noqa: E402

# name, sampler settings (steps come from --steps), and whether all assets form one batch.
CASES = [
    ("serial-cfg", dict(guidance_strength=7.5, guidance_interval=(0.0, 1.0),
                        guidance_rescale=0.0, cfg_mode="serial"), False),
    ("batched-cfg", dict(guidance_strength=7.5, guidance_interval=(0.0, 1.0),
                         guidance_rescale=0.0, cfg_mode="batched"), False),
    # Released-default style: interval [0.6, 1] (with 4 steps, t = 0.5 runs unguided)
    # and guidance rescale 0.5.
    ("interval-rescale", dict(guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                              guidance_rescale=0.5, cfg_mode="serial"), False),
    ("no-cfg", dict(guidance_strength=1.0, guidance_interval=(0.0, 1.0),
                    guidance_rescale=0.0, cfg_mode="serial"), False),
    # Every asset in one request of B assets (2B with batched CFG): per-asset attention,
    # modulation rows and rescale statistics.
    ("multi-asset-batched-rescale", dict(guidance_strength=7.5, guidance_interval=(0.6, 1.0),
                                         guidance_rescale=0.5, cfg_mode="batched"), True),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def copy_inputs(checkpoint, manifest_path, dest):
    """Copies the checkpoint and payload into dest; returns the copies' paths."""
    os.makedirs(dest, exist_ok=True)
    ckpt_copy = os.path.join(dest, os.path.basename(checkpoint))
    for src in (checkpoint, io_formats.checkpoint_tensors_path(checkpoint)):
        shutil.copyfile(src, os.path.join(dest, os.path.basename(src)))
    m = io_formats.read_manifest(manifest_path)
    for e in m["assets"]:
        target = os.path.join(dest, e["file"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(m["dir"], e["file"]), target)
    man_copy = os.path.join(dest, "manifest.json")
    io_formats.write_manifest(man_copy, m)
    return ckpt_copy, man_copy


def environment(device):
    env = {"torch": torch.__version__, "device": str(device),
           "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
           "matmul_allow_bf16_reduced_precision_reduction":
               torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}
    if device.type == "cuda":
        env.update({"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version(),
                    "sdpa_flash": torch.backends.cuda.flash_sdp_enabled(),
                    "sdpa_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                    "sdpa_cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
                    "sdpa_math": torch.backends.cuda.math_sdp_enabled()})
    return env


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="NAME.json of the model")
    p.add_argument("--manifest", help="payload manifest")
    p.add_argument("--tiny", action="store_true",
                   help="generate a tiny checkpoint and payload (fixtures.py) as the inputs")
    p.add_argument("--preset", choices=sorted(fixtures.PRESETS), default=None,
                   help="as --tiny with another fixtures.py preset (tiny-ss: the dense model)")
    p.add_argument("--out", required=True, help="golden folder (created)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rescale-t", type=float, default=3.0)
    p.add_argument("--attn", choices=("loop", "varlen"), default="loop")
    p.add_argument("--asset", action="append", default=None, help="subset of assets")
    p.add_argument("--case", action="append", default=None,
                   help=f"subset of cases: {[c[0] for c in CASES]}")
    a = p.parse_args(argv)
    if a.tiny and a.preset and a.preset != "tiny":
        p.error("--tiny is --preset tiny; pass one of them")
    preset = "tiny" if a.tiny else a.preset
    if bool(preset) == bool(a.checkpoint or a.manifest) or \
            (not preset and not (a.checkpoint and a.manifest)):
        p.error("pass either --tiny (or --preset NAME) or both --checkpoint and --manifest")
    inputs = os.path.join(a.out, "inputs")
    if preset:
        ckpt, man = fixtures.write_fixture(
            inputs, args=fixtures.PRESETS[preset], name=preset,
            model_name=fixtures.PRESET_MODELS.get(preset, "SLatFlowModel"))
    else:
        ckpt, man = copy_inputs(a.checkpoint, a.manifest, inputs)
    cases = [c for c in CASES if not a.case or c[0] in a.case]
    if a.case and len(cases) != len(a.case):
        p.error(f"unknown case in {a.case}; known: {[c[0] for c in CASES]}")

    manifest = io_formats.read_manifest(man)
    names = a.asset or [e["name"] for e in manifest["assets"]]
    doc = {"format": "sparse3d-golden", "version": 1,
           "created_by": "tools/torch_ref/make_golden.py",
           "environment": environment(torch.device(a.device)),
           "checkpoint": os.path.relpath(ckpt, a.out),
           "checkpoint_sha256": sha256(io_formats.checkpoint_tensors_path(ckpt)),
           "manifest": os.path.relpath(man, a.out),
           "assets": names, "cases": []}
    for name, kw, batch_assets in cases:
        s = SamplerSettings(steps=a.steps, rescale_t=a.rescale_t, attn_mode=a.attn, **kw)
        case_dir = os.path.join(a.out, name)
        argv_run = ["--checkpoint", ckpt, "--manifest", man, "--device", a.device,
                    "--out", case_dir, "--steps", str(s.steps), "--rescale-t", str(s.rescale_t),
                    "--cfg", repr(s.guidance_strength), "--interval",
                    repr(s.guidance_interval[0]), repr(s.guidance_interval[1]),
                    "--guidance-rescale", repr(s.guidance_rescale), "--cfg-mode", s.cfg_mode,
                    "--attn", s.attn_mode, "--dump-first-forward", "--quiet"]
        argv_run += [x for n in names for x in ("--asset", n)]
        if batch_assets:
            argv_run.append("--batch-assets")
        print(f"case {name}")
        run_cli.run(argv_run)
        files = {n: os.path.join(name, f"{n}.safetensors") for n in names}
        doc["cases"].append({
            "name": name, "batch_assets": batch_assets,
            "settings": {"steps": s.steps, "rescale_t": s.rescale_t,
                         "guidance_strength": s.guidance_strength,
                         "guidance_interval": list(s.guidance_interval),
                         "guidance_rescale": s.guidance_rescale, "cfg_mode": s.cfg_mode,
                         "sigma_min": s.sigma_min, "attn": s.attn_mode},
            "files": files,
            "sha256": {n: sha256(os.path.join(a.out, f)) for n, f in files.items()}})
    path = os.path.join(a.out, "golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
