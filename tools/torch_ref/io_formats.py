"""Files the oracle reads and writes, and the noise RNG, as docs/FORMATS.md defines them.

Everything here is plain numpy / safetensors so that the RNG and the readers can be
tested without torch's model code; torch is imported only where tensors are made.
"""
import json
import math
import os

import numpy as np

# ---------------------------------------------------------------------------------------
# Noise RNG (docs/FORMATS.md, "Noise RNG"), vectorised in numpy uint64 arithmetic.
# numpy's uint64 array arithmetic wraps modulo 2^64 like C++ unsigned integers, so
# splitmix64 is a direct transcription. The transcendental functions go through Python's
# math module (the C library's log/cos/sin, as the C++ engine calls them) rather than
# numpy's own SIMD versions, which may differ in the last bit of a double.
# ---------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TWO_PI = 2.0 * math.pi       # C++ evaluates 2.0 * M_PI * u2 left to right
_TWO_POW_M53 = 2.0 ** -53


def splitmix64(x):
    """splitmix64 of a uint64 array (element-wise, wrapping)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


def rng_key(seed, counters):
    """key(seed, c) = splitmix64(seed ^ splitmix64(c)) for a uint64 array of counters."""
    return splitmix64(np.uint64(seed) ^ splitmix64(counters))


def _check_seed(seed):
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 53:
        raise ValueError(f"noise seed {seed!r} must be an integer in [0, 2^53)")
    return int(seed)


def uniform_at(seed, index):
    """Uniform double in [0, 1) for element `index` (as core/rng.h's uniform_at)."""
    key = rng_key(_check_seed(seed), np.asarray(index, dtype=np.uint64))
    return (key >> np.uint64(11)).astype(np.float64) * _TWO_POW_M53


def normal_stream(seed, count, begin=0):
    """Elements [begin, begin + count) of the standard-normal stream `seed`, float32."""
    seed = _check_seed(seed)
    if count <= 0:
        return np.zeros(0, dtype=np.float32)
    first_pair = begin // 2
    last_pair = (begin + count + 1) // 2
    pairs = np.arange(first_pair, last_pair, dtype=np.uint64)
    k1 = rng_key(seed, pairs * np.uint64(2))
    k2 = rng_key(seed, pairs * np.uint64(2) + np.uint64(1))
    # Both integers are below 2^53 (+1), so the conversions to double are exact.
    u1 = ((k1 >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * _TWO_POW_M53
    u2 = (k2 >> np.uint64(11)).astype(np.float64) * _TWO_POW_M53
    log_u1 = np.fromiter(map(math.log, u1.tolist()), dtype=np.float64, count=u1.size)
    r = np.sqrt(-2.0 * log_u1)          # sqrt is correctly rounded everywhere
    a = _TWO_PI * u2
    cos_a = np.fromiter(map(math.cos, a.tolist()), dtype=np.float64, count=a.size)
    sin_a = np.fromiter(map(math.sin, a.tolist()), dtype=np.float64, count=a.size)
    out = np.empty(2 * pairs.size, dtype=np.float32)
    out[0::2] = (r * cos_a).astype(np.float32)   # double product, one rounding to float
    out[1::2] = (r * sin_a).astype(np.float32)
    skip = begin - 2 * first_pair
    return out[skip:skip + count]


def normal_tensor(seed, shape):
    """A row-major float32 array of `shape` filled from the stream `seed`."""
    n = int(np.prod(shape, dtype=np.int64))
    return normal_stream(seed, n).reshape(shape)


# ---------------------------------------------------------------------------------------
# Checkpoint: NAME.json + NAME.safetensors
# ---------------------------------------------------------------------------------------

MODEL_NAMES = ("SLatFlowModel", "SparseStructureFlowModel")


def read_model_config(json_path, names=MODEL_NAMES):
    """(name, args) of a checkpoint's NAME.json: {"name": one of names, "args": {...}}
    (args validated by model.ModelConfig / dense.config_from_args)."""
    with open(json_path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("name") not in names:
        expected = " or ".join(f"\"{n}\"" for n in names)
        raise ValueError(f"checkpoint config {json_path}: expected {{\"name\": "
                         f"{expected}, \"args\": {{...}}}}, found name "
                         f"{doc.get('name') if isinstance(doc, dict) else type(doc).__name__!r}")
    args = doc.get("args")
    if not isinstance(args, dict):
        raise ValueError(f"checkpoint config {json_path}: \"args\" must be an object")
    return doc["name"], args


def read_config(json_path):
    """The "args" dict of an SLatFlowModel checkpoint's NAME.json."""
    return read_model_config(json_path, ("SLatFlowModel",))[1]


def checkpoint_tensors_path(json_path):
    base, ext = os.path.splitext(json_path)
    if ext != ".json":
        raise ValueError(f"checkpoint {json_path}: pass the NAME.json file; the tensors are "
                         "read from NAME.safetensors beside it")
    return base + ".safetensors"


def load_model_checkpoint(json_path):
    """(model name, args dict, state dict of CPU tensors as stored) for NAME.json of either
    model (SLatFlowModel or SparseStructureFlowModel)."""
    from safetensors.torch import load_file
    name, args = read_model_config(json_path)
    tensors_path = checkpoint_tensors_path(json_path)
    if not os.path.exists(tensors_path):
        raise FileNotFoundError(f"checkpoint {json_path}: tensor file {tensors_path} not found")
    return name, args, load_file(tensors_path, device="cpu")


def load_checkpoint(json_path):
    """(args dict, state dict of CPU tensors as stored) for an SLatFlowModel NAME.json."""
    read_config(json_path)
    return load_model_checkpoint(json_path)[1:]


def write_checkpoint(json_path, args, state_dict, name="SLatFlowModel"):
    """Writes NAME.json and NAME.safetensors (used by the test fixtures)."""
    from safetensors.torch import save_file
    if name not in MODEL_NAMES:
        raise ValueError(f"model name {name!r} is not one of {MODEL_NAMES}")
    with open(json_path, "w") as f:
        json.dump({"name": name, "args": args}, f, indent=2)
        f.write("\n")
    save_file({k: v.contiguous() for k, v in state_dict.items()},
              checkpoint_tensors_path(json_path))


# ---------------------------------------------------------------------------------------
# Payload manifest and asset files
# ---------------------------------------------------------------------------------------

_MANIFEST_KEYS = {"format", "version", "grid", "cond_tokens", "cond_channels",
                  "concat_channels", "assets"}
_ENTRY_KEYS = {"name", "file", "tokens", "noise_seed", "set"}


def read_manifest(path):
    """The manifest as a dict with "dir" (its folder) added; every field checked."""
    with open(path) as f:
        m = json.load(f)
    where = f"manifest {path}"
    if m.get("format") != "sparse3d-payload-manifest" or m.get("version") != 1:
        raise ValueError(f"{where}: expected format \"sparse3d-payload-manifest\" version 1, "
                         f"found {m.get('format')!r} version {m.get('version')!r}")
    unknown = set(m) - _MANIFEST_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("grid", "cond_tokens", "cond_channels"):
        if not isinstance(m.get(key), int) or m[key] <= 0:
            raise ValueError(f"{where}: \"{key}\" must be a positive integer, found {m.get(key)!r}")
    m.setdefault("concat_channels", 0)
    if not isinstance(m["concat_channels"], int) or m["concat_channels"] < 0:
        raise ValueError(f"{where}: \"concat_channels\" must be an integer >= 0")
    if not isinstance(m.get("assets"), list) or not m["assets"]:
        raise ValueError(f"{where}: \"assets\" must be a non-empty list")
    names = set()
    for i, e in enumerate(m["assets"]):
        ew = f"{where}: asset {i}"
        unknown = set(e) - _ENTRY_KEYS
        if unknown:
            raise ValueError(f"{ew}: unknown keys {sorted(unknown)}")
        if not isinstance(e.get("name"), str) or not e["name"]:
            raise ValueError(f"{ew}: \"name\" must be a non-empty string")
        if e["name"] in names:
            raise ValueError(f"{ew}: duplicate name {e['name']!r}")
        names.add(e["name"])
        if not isinstance(e.get("file"), str) or not e["file"]:
            raise ValueError(f"{ew} ({e['name']}): \"file\" must be a non-empty string")
        if not isinstance(e.get("tokens"), int) or e["tokens"] <= 0:
            raise ValueError(f"{ew} ({e['name']}): \"tokens\" must be a positive integer")
        seed = e.get("noise_seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 53:
            raise ValueError(f"{ew} ({e['name']}): \"noise_seed\" must be an integer in "
                             f"[0, 2^53), found {seed!r}")
        e.setdefault("set", "default")
        if e["set"] not in ("default", "long-tail"):
            raise ValueError(f"{ew} ({e['name']}): \"set\" must be \"default\" or "
                             f"\"long-tail\", found {e['set']!r}")
    m["dir"] = os.path.dirname(os.path.abspath(path))
    return m


def write_manifest(path, manifest):
    doc = {k: v for k, v in manifest.items() if k != "dir"}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def read_asset(manifest, entry):
    """Dict with name, noise_seed, coords (int32 [T, 4]), cond ([L, Cc], as stored) and
    concat_cond (float32 [T, Cc'] or None), as CPU torch tensors, validated."""
    import torch
    from safetensors.torch import load_file
    path = os.path.join(manifest["dir"], entry["file"])
    where = f"payload {entry['name']} ({path})"
    t = load_file(path, device="cpu")
    expected = {"coords", "cond"} | ({"concat_cond"} if manifest["concat_channels"] else set())
    if set(t) != expected:
        raise ValueError(f"{where}: expected tensors {sorted(expected)}, found {sorted(t)}")
    coords, cond = t["coords"], t["cond"]
    T = entry["tokens"]
    if coords.dtype != torch.int32 or tuple(coords.shape) != (T, 4):
        raise ValueError(f"{where}: coords must be I32 [{T}, 4], found "
                         f"{coords.dtype} {list(coords.shape)}")
    c = coords.numpy().astype(np.int64)
    if (c[:, 0] != 0).any():
        row = int(np.nonzero(c[:, 0] != 0)[0][0])
        raise ValueError(f"{where}: coords row {row} has batch index {c[row, 0]}, expected 0")
    grid = manifest["grid"]
    bad = (c[:, 1:] < 0) | (c[:, 1:] >= grid)
    if bad.any():
        row = int(np.nonzero(bad.any(axis=1))[0][0])
        raise ValueError(f"{where}: coords row {row} = {c[row].tolist()} lies outside "
                         f"[0, {grid})")
    lin = (c[:, 1] * grid + c[:, 2]) * grid + c[:, 3]
    if T > 1 and not (np.diff(lin) > 0).all():
        row = int(np.nonzero(np.diff(lin) <= 0)[0][0]) + 1
        raise ValueError(f"{where}: coords rows must be strictly increasing in (x, y, z); "
                         f"row {row} = {c[row].tolist()} follows {c[row - 1].tolist()}")
    L, Cc = manifest["cond_tokens"], manifest["cond_channels"]
    if cond.dtype not in (torch.bfloat16, torch.float32) or tuple(cond.shape) != (L, Cc):
        raise ValueError(f"{where}: cond must be BF16 or F32 [{L}, {Cc}], found "
                         f"{cond.dtype} {list(cond.shape)}")
    if not torch.isfinite(cond).all():
        raise ValueError(f"{where}: cond has non-finite values")
    concat = None
    if manifest["concat_channels"]:
        concat = t["concat_cond"]
        want = (T, manifest["concat_channels"])
        if concat.dtype != torch.float32 or tuple(concat.shape) != want:
            raise ValueError(f"{where}: concat_cond must be F32 {list(want)}, found "
                             f"{concat.dtype} {list(concat.shape)}")
        if not torch.isfinite(concat).all():
            raise ValueError(f"{where}: concat_cond has non-finite values")
    return {"name": entry["name"], "noise_seed": entry["noise_seed"], "coords": coords,
            "cond": cond, "concat_cond": concat}


def write_asset(path, coords, cond, concat_cond=None):
    from safetensors.torch import save_file
    tensors = {"coords": coords.contiguous(), "cond": cond.contiguous()}
    if concat_cond is not None:
        tensors["concat_cond"] = concat_cond.contiguous()
    save_file(tensors, path)


def write_output(path, tensors):
    """An output file: every tensor moved to the CPU, made contiguous (names as given)."""
    from safetensors.torch import save_file
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, path)
