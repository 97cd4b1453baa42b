"""Fixtures of the Python tests: the tiny checkpoint of the C++ tests (tests/data), a NumPy
reader of its safetensors file (CI has no torch), synthetic requests and a SparseTensor
stand-in with TRELLIS.2's duck type (.feats, .coords, .replace)."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import same_bits  # noqa: E402  (the repository's dependency-free safetensors reader)

DATA = os.environ.get("SPARSE3D_TEST_DATA",
                      os.path.join(os.path.dirname(__file__), "..", "data"))
TINY = os.path.join(DATA, "golden", "inputs", "tiny.json")


def read_safetensors(path):
    """name -> NumPy array (bf16 read as float32; f32, i32), over tools/same_bits.py's reader."""
    out = {}
    for name, (dtype, shape, raw) in same_bits.tensors(path).items():
        if dtype == "BF16":
            values = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dtype in ("F32", "I32"):
            values = np.frombuffer(raw, dtype=np.float32 if dtype == "F32" else np.int32)
        else:
            raise ValueError(f"{name}: dtype {dtype} not handled by the test reader")
        out[name] = values.reshape(shape).copy()
    return out


def write_safetensors(path, tensors, bf16=()):
    """A safetensors file of NumPy arrays (f32, i32; the names in `bf16` stored as bf16, the
    upper halves of their f32 values), for the tests' inputs files."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        if name in bf16:
            a, dtype = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16), "BF16"
        else:
            dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


class SparseTensor:
    """TRELLIS.2's SparseTensor as the drop-in sees it: feats [T, C], coords int32 [T, 4]."""

    def __init__(self, feats, coords):
        self.feats, self.coords = feats, coords

    def replace(self, feats):
        return SparseTensor(feats, self.coords)

    @property
    def shape(self):
        return (int(self.coords[:, 0].max()) + 1, self.feats.shape[1])


def make_request(counts, seed, cond_tokens=9, cond_channels=64, res=64):
    """coords int32 [T, 4] for assets of `counts` tokens (distinct voxels, batch order) and
    a float32 condition [B, L, C]."""
    rng = np.random.default_rng(seed)
    rows = []
    for b, n in enumerate(counts):
        flat = rng.choice(res ** 3, size=n, replace=False)
        flat.sort()
        xyz = np.stack(np.unravel_index(flat, (res, res, res)), axis=1)
        rows.append(np.concatenate([np.full((n, 1), b), xyz], axis=1))
    coords = np.ascontiguousarray(np.concatenate(rows).astype(np.int32))
    cond = rng.standard_normal((len(counts), cond_tokens, cond_channels)).astype(np.float32)
    return coords, cond


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


@pytest.fixture
def engine(cache_dir):
    import sparse3d_engine as s3d
    return s3d.Engine(TINY, device="cpu", cache_dir=cache_dir)


@pytest.fixture(scope="session")
def tiny_config():
    with open(TINY) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def tiny_state_dict():
    return read_safetensors(TINY[:-len(".json")] + ".safetensors")


# ---- The dense family (SparseStructureFlowModel) ------------------------------------------
# A tiny dense checkpoint from the tiny SLat weights (the two families share tensor names):
# resolution DENSE_R, 8 channels in and out (the input and output layers cut to 8).
DENSE_R = 8
DENSE_C = 8


@pytest.fixture(scope="session")
def dense_config(tiny_config):
    args = {k: v for k, v in tiny_config["args"].items() if k != "rope_freq"}
    args.update(resolution=DENSE_R, in_channels=DENSE_C, out_channels=DENSE_C)
    return {"name": "SparseStructureFlowModel", "args": args}


@pytest.fixture(scope="session")
def dense_state_dict(tiny_state_dict):
    sd = dict(tiny_state_dict)
    sd["input_layer.weight"] = np.ascontiguousarray(sd["input_layer.weight"][:, :DENSE_C])
    sd["out_layer.weight"] = np.ascontiguousarray(sd["out_layer.weight"][:DENSE_C])
    sd["out_layer.bias"] = np.ascontiguousarray(sd["out_layer.bias"][:DENSE_C])
    return sd


@pytest.fixture
def dense_engine(dense_config, dense_state_dict, cache_dir):
    import sparse3d_engine as s3d
    return s3d.Engine.from_state_dict(dense_config, dense_state_dict, name="tiny dense",
                                           device="cpu", cache_dir=cache_dir)


def grid_coords(batch, res=DENSE_R):
    """The full res^3 grid of each of `batch` assets in raster order (token n = i R^2 + j R
    + k): int32 [batch * res^3, 4] rows (b, i, j, k)."""
    ijk = np.stack(np.unravel_index(np.arange(res ** 3), (res, res, res)), axis=1)
    rows = [np.concatenate([np.full((res ** 3, 1), b), ijk], axis=1) for b in range(batch)]
    return np.ascontiguousarray(np.concatenate(rows).astype(np.int32))


def to_tokens(volume):
    """[B, C, R, R, R] -> [B R^3, C] (channels last, voxels in raster order)."""
    B, C = volume.shape[:2]
    return np.ascontiguousarray(volume.reshape(B, C, -1).transpose(0, 2, 1).reshape(-1, C))


def to_volume(tokens, batch, res=DENSE_R):
    """[B R^3, C] -> [B, C, R, R, R]."""
    C = tokens.shape[1]
    return np.ascontiguousarray(tokens.reshape(batch, res ** 3, C).transpose(0, 2, 1)
                                .reshape(batch, C, res, res, res))


def dense_request(batch, seed, cond_tokens=9, cond_channels=64):
    """A noise volume f32 [B, 8, R, R, R] and a condition [B, L, C]."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((batch, DENSE_C, DENSE_R, DENSE_R, DENSE_R)).astype(np.float32)
    cond = rng.standard_normal((batch, cond_tokens, cond_channels)).astype(np.float32)
    return noise, cond
