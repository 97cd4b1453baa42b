#!/usr/bin/env python3
"""Writes the generated fuzz seeds (scripts/fuzz.sh): valid inputs for the targets whose
inputs are built, not found (fuzz_asset's prefixed assets, fuzz_cli's command lines), and
the large inputs at the parsers' real size limits (docs/RELIABILITY.md), which are too big
to commit. Usage: make_seeds.py OUT_DIR  ->  OUT_DIR/<target>/{small,large}/<name>."""
import json
import os
import random
import struct
import sys

out = sys.argv[1]


def put(target, kind, name, data):
    d = os.path.join(out, target, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None, pad_header_to=0):
    """tensors: [(name, dtype, shape, bytes)] -> a safetensors file."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header).encode()
    if pad_header_to > len(text):
        text += b" " * (pad_header_to - len(text))
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def asset(rng, tokens, grid, cond_tokens, cond_channels, concat):
    cells = sorted(rng.sample(range(grid ** 3), tokens))
    coords = b"".join(struct.pack("<4i", 0, c // (grid * grid), c // grid % grid, c % grid)
                      for c in cells)
    t = [("coords", "I32", [tokens, 4], coords),
         ("cond", "BF16", [cond_tokens, cond_channels],
          bf16(rng.uniform(-2, 2) for _ in range(cond_tokens * cond_channels)))]
    if concat:
        t.append(("concat_cond", "F32", [tokens, concat],
                  b"".join(struct.pack("<f", rng.uniform(-1, 1)) for _ in range(tokens * concat))))
    return safetensors(t, {"format": "sparse3d-payload-asset"})


def prefix(grid, cond_tokens, cond_channels, concat, tokens):
    """fuzz_asset's first 12 bytes for this manifest (each field value - 1 modulo its range)."""
    return struct.pack("<6H", grid - 1, cond_tokens - 1, cond_channels - 1, concat, tokens - 1, 0)


rng = random.Random(7)
# fuzz_asset: valid assets with the manifest prefix that matches them.
for tokens, grid, L, C, Cc in [(1, 8, 1, 1, 0), (7, 16, 3, 8, 0), (300, 64, 9, 16, 2),
                               (64, 4, 2, 5, 1)]:
    put("fuzz_asset", "small", f"valid_t{tokens}_g{grid}_cc{Cc}",
        prefix(grid, L, C, Cc, tokens) + asset(rng, tokens, grid, L, C, Cc))
put("fuzz_asset", "large", "valid_t4096_g1024",
    prefix(1024, 64, 64, 8, 4096) + asset(rng, 4096, 1024, 64, 64, 8))

# fuzz_glb_input: valid GLB input files (docs/FORMATS.md), small odd sizes and one large.
def glb_input(rng, V, F, L, C, grid):
    import numpy as np
    g = np.random.default_rng(rng.randrange(1 << 30))
    verts = g.uniform(-0.5, 0.5, (V, 3)).astype("<f4")
    faces = g.integers(0, V, (F, 3)).astype("<i4")
    flat = g.choice(grid ** 3, size=L, replace=False)
    coords = np.stack([flat // (grid * grid), (flat // grid) % grid, flat % grid], 1).astype("<i4")
    attrs = g.uniform(0, 1, (L, C)).astype("<f4")
    meta = {"format": "sparse3d-glb-input/1", "aabb": "[[-0.5,-0.5,-0.5],[0.5,0.5,0.5]]",
            "grid_size": json.dumps([grid] * 3), "source": "fuzz seed",
            "attr_layout": '{"base_color":[0,3],"metallic":[3,4],"roughness":[4,5],"alpha":[5,6]}'}
    return safetensors([("vertices", "F32", [V, 3], verts.tobytes()),
                        ("faces", "I32", [F, 3], faces.tobytes()),
                        ("coords", "I32", [L, 3], coords.tobytes()),
                        ("attrs", "F32", [L, C], attrs.tobytes())], meta)


for V, F, L, C, grid in [(3, 1, 1, 6, 2), (7, 5, 11, 6, 5), (40, 77, 33, 9, 8)]:
    put("fuzz_glb_input", "small", f"valid_v{V}_f{F}_l{L}_c{C}", glb_input(rng, V, F, L, C, grid))
put("fuzz_glb_input", "large", "valid_v100k_f200k_l100k",
    glb_input(rng, 100000, 200000, 100000, 6, 64))

# fuzz_cli: command lines (arguments separated by NUL), good and refused ones.
lines = [
    "run --checkpoint ck.json --manifest m.json --steps 12 --cfg 7.5 --path beyond",
    "run --checkpoint ck.json --manifest m.json --asset a00 --asset a01 --out o --device cpu",
    "run --checkpoint ck.json --manifest m.json --interval 0.6 1.0 --rescale-t 3 --guidance-rescale 0.5",
    "run --checkpoint ck.json --manifest m.json --steps -1",
    "run --checkpoint ck.json --manifest m.json --cfg nan --path beyond-cuda_graphs --enable gelu_tanh",
    "bench --checkpoint ck.json --manifest m.json --paths pure_eager,beyond --repeats 3 --warmup 1",
    "export-glb --input a.safetensors --out a.glb --decimation-target 500000 --texture-size 2048 --remesh --remesh-project 0",
    "export-glb --input a.safetensors --out a.glb --texture-size 0 --texture-format jpg",
    "make-glb-input --procedural torus --resolution 1024 --out t.safetensors",
    "bench --checkpoint ck.json --manifest m.json --ablate --sampler protocol --max-device-memory 8",
    "profile --checkpoint ck.json --manifest m.json --asset a --t 0.5",
    "make-checkpoint --preset tiny --seed 3 --dtype bf16 --out ck",
    "make-payloads --set small --tokens 30,20 --out pl",
    "bench-report --result r.json --json",
    "bench-kernels --tokens 3664,30227",
    "info", "--version", "--help", "run --help",
]
for i, line in enumerate(lines):
    put("fuzz_cli", "small", f"line{i:02d}", "\0".join(line.split(" ")))

# Large inputs at the real limits (JSON files 64 MiB, 2^20 values, depth 64; safetensors
# headers 100,000,000 bytes): each must be refused or read, in linear time.
empty_objects = lambda n: "[" + ",".join(["{}"] * n) + "]"
manifest_head = '{"format": "sparse3d-payload-manifest", "version": 1, "grid": 64, ' \
                '"cond_tokens": 9, "cond_channels": 16, "assets": '
put("fuzz_manifest", "large", "assets_200k_empty_objects", manifest_head + empty_objects(200000) + "}")
n64 = (64 << 20) // 3 - 64
put("fuzz_manifest", "large", "at_64mib_empty_objects", manifest_head + empty_objects(n64) + "}")
put("fuzz_manifest", "large", "values_2pow20_plus_1", manifest_head + "[" + ",".join(["0"] * ((1 << 20) + 1)) + "]}")
put("fuzz_manifest", "large", "depth_100k", "[" * 100000 + "]" * 100000)
put("fuzz_manifest", "large", "assets_20k_valid", manifest_head + json.dumps(
    [{"name": f"a{i}", "file": f"a{i}.safetensors", "tokens": 1 + i, "noise_seed": i,
      "set": "default"} for i in range(20000)]) + "}")
config_head = '{"name": "SLatFlowModel", "args": '
put("fuzz_config", "large", "args_700k_empty_objects", config_head + empty_objects(700000) + "}")
put("fuzz_config", "large", "string_16mib", config_head + '{"pe_mode": "' + "r" * (16 << 20) + '"}}')
put("fuzz_config", "large", "depth_100k", config_head + "[" * 100000 + "]" * 100000 + "}")
st = lambda text: struct.pack("<Q", len(text)) + text
put("fuzz_safetensors", "large", "header_700k_empty_objects",
    st(('{"__metadata__": {}, "x": ' + empty_objects(700000) + "}").encode()))
put("fuzz_safetensors", "large", "header_at_limit_spaces", st(b"{}" + b" " * (100_000_000 - 2)))
put("fuzz_safetensors", "large", "header_over_limit", st(b"{}" + b" " * 100_000_000))
put("fuzz_safetensors", "large", "tensors_100k",
    safetensors([(f"t{i}", "BF16", [1], b"\0\0") for i in range(100000)]))
