"""Bit-for-bit comparison of engine output files (safetensors), paired by file name.

  python3 tools/same_bits.py DIR_A DIR_B [--tensors latent,v_cond,v_uncond] [--within TOL]

Prints one line per file and tensor (identical, or how many bytes differ) and exits 1
when any compared tensor differs or is missing on one side. With --within TOL (f32 tensors):
the relative L2 error of A against B instead, and exit 1 when any is above TOL or not finite
(a model under another weight format against the plain one). Reads the format directly
(8-byte little-endian header length, JSON header, raw data), so it needs only Python.
"""
import argparse
import json
import os
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), data[begin:end])
    return out


def rel_l2(dtype, ra, rb):
    """||a - b|| / ||b|| over two raw little-endian f32 buffers (inf where b is all zero)."""
    if dtype != "F32":
        raise SystemExit(f"--within compares F32 tensors, got {dtype}")
    n = len(ra) // 4
    a, b = struct.unpack(f"<{n}f", ra), struct.unpack(f"<{n}f", rb)
    num = sum((x - y) * (x - y) for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return (num / den) ** 0.5 if den > 0 else float("inf")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tensors", default="latent,v_cond,v_uncond")
    p.add_argument("--within", type=float, default=None)
    args = p.parse_args()
    names = args.tensors.split(",")
    files = sorted(f for f in os.listdir(args.a) if f.endswith(".safetensors"))
    bad = 0
    if not files:
        print(f"no output files in {args.a}")
        return 1
    for f in files:
        pb = os.path.join(args.b, f)
        if not os.path.exists(pb):
            print(f"{f}: missing in {args.b}")
            bad += 1
            continue
        ta, tb = tensors(os.path.join(args.a, f)), tensors(pb)
        for name in names:
            if name not in ta and name not in tb:
                continue
            if name not in ta or name not in tb:
                print(f"{f} {name}: present on one side only")
                bad += 1
                continue
            (da, sa, ra), (db, sb, rb) = ta[name], tb[name]
            if (da, sa) != (db, sb):
                print(f"{f} {name}: {da}{list(sa)} vs {db}{list(sb)}")
                bad += 1
            elif args.within is not None:
                err = rel_l2(da, ra, rb)
                ok = err == err and err <= args.within
                print(f"{f} {name}: rel L2 {err:.3e} ({'within' if ok else 'ABOVE'} {args.within})")
                bad += 0 if ok else 1
            elif ra != rb:
                diff = sum(1 for x, y in zip(ra, rb) if x != y)
                print(f"{f} {name}: {diff} of {len(ra)} bytes differ")
                bad += 1
            else:
                print(f"{f} {name}: identical ({len(ra)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
