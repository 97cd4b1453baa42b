"""Compare two output files (or two folders of them, paired by file name): for every
tensor name present in both, the relative L2 error ||a - b|| / ||b|| (b = reference,
the second argument), the max abs error and NaN/Inf counts.

  python3 tools/torch_ref/compare.py out/engine/a00.safetensors out/torch/a00.safetensors \
      --max-rel latent=2e-2 --max-rel v_cond=1e-2

Exit status 1 when a threshold is exceeded, a thresholded tensor is missing, shapes
differ or either side has NaN/Inf; 0 otherwise. "--max-rel *=VALUE" applies to every name
without its own threshold.
"""
import argparse
import math
import os
import sys

import numpy as np


def load(path):
    from safetensors.numpy import load_file
    try:
        return load_file(path)
    except TypeError:      # bf16 tensors: numpy has no bf16, go through torch
        from safetensors.torch import load_file as load_torch
        return {k: v.float().numpy() for k, v in load_torch(path).items()}


def tensor_stats(a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(b64)
    diff = np.where(finite, a64 - b64, 0.0)
    ref = np.where(finite, b64, 0.0)
    ref_norm = float(np.linalg.norm(ref))
    err_norm = float(np.linalg.norm(diff))
    if ref_norm > 0:
        rel = err_norm / ref_norm
    else:
        rel = 0.0 if err_norm == 0 else math.inf
    return {"rel_l2": rel, "max_abs": float(np.abs(diff).max()) if diff.size else 0.0,
            "nan_a": int(np.isnan(a64).sum()), "inf_a": int(np.isinf(a64).sum()),
            "nan_b": int(np.isnan(b64).sum()), "inf_b": int(np.isinf(b64).sum())}


def parse_thresholds(items):
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--max-rel {item!r}: expected NAME=VALUE")
        out[name] = float(value)
    return out


def compare_files(path_a, path_b, thresholds, label=""):
    """Prints one table; returns a list of failure messages."""
    a, b = load(path_a), load(path_b)
    failures = []
    print(f"{label or path_a}  vs  {path_b}")
    print(f"  {'tensor':<12} {'shape':<14} {'rel_l2':>11} {'max_abs':>11} "
          f"{'nan/inf a':>10} {'nan/inf b':>10}  limit")
    for name in sorted(set(a) & set(b)):
        limit = thresholds.get(name, thresholds.get("*"))
        if a[name].shape != b[name].shape:
            print(f"  {name:<12} shape {list(a[name].shape)} vs {list(b[name].shape)}")
            failures.append(f"{name}: shapes differ")
            continue
        s = tensor_stats(a[name], b[name])
        shape = "x".join(map(str, a[name].shape))
        verdict = ""
        if limit is not None:
            ok = s["rel_l2"] <= limit
            verdict = f"{limit:g} {'ok' if ok else 'EXCEEDED'}"
            if not ok:
                failures.append(f"{name}: rel_l2 {s['rel_l2']:.3e} > {limit:g}")
        nonfinite = s["nan_a"] + s["inf_a"] + s["nan_b"] + s["inf_b"]
        if nonfinite:
            failures.append(f"{name}: non-finite values")
        print(f"  {name:<12} {shape:<14} {s['rel_l2']:>11.3e} {s['max_abs']:>11.3e} "
              f"{s['nan_a']:>4}/{s['inf_a']:<5} {s['nan_b']:>4}/{s['inf_b']:<5}  {verdict}")
    for name in sorted(set(a) ^ set(b)):
        side = "first" if name in a else "second"
        print(f"  {name:<12} only in the {side} file")
        if name in thresholds:
            failures.append(f"{name}: missing from one file")
    return failures


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a", help="file or folder to check")
    p.add_argument("b", help="reference file or folder")
    p.add_argument("--max-rel", action="append", metavar="NAME=VALUE",
                   help="relative L2 limit for tensor NAME (repeatable; * = all others)")
    args = p.parse_args(argv)
    thresholds = parse_thresholds(args.max_rel)
    if os.path.isdir(args.a) != os.path.isdir(args.b):
        raise SystemExit("pass two files or two folders")
    if os.path.isdir(args.a):
        names_a = {f for f in os.listdir(args.a) if f.endswith(".safetensors")}
        names_b = {f for f in os.listdir(args.b) if f.endswith(".safetensors")}
        pairs = [(os.path.join(args.a, f), os.path.join(args.b, f)) for f in sorted(names_a & names_b)]
        failures = [f"{f}: only in {args.a if f in names_a else args.b}"
                    for f in sorted(names_a ^ names_b)]
        if not pairs:
            raise SystemExit("no file names in common")
    else:
        pairs, failures = [(args.a, args.b)], []
    for pa, pb in pairs:
        failures += [f"{os.path.basename(pa)}: {m}" for m in compare_files(pa, pb, thresholds)]
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
