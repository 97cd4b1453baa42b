"""A small safetensors reader and writer over NumPy, for `python -m sparse3d_engine run`
(its --inputs file and its output). Only what those need: F32, BF16, F16 and I32 tensors,
read whole into host memory. BF16 is read as float32 (exact: bf16 is the upper half of an
f32) since NumPy has no bfloat16.
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
import tempfile
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

# safetensors dtype -> (NumPy dtype as stored, bytes per element)
_STORED: Dict[str, Tuple[np.dtype, int]] = {"F32": (np.dtype("<f4"), 4), "BF16": (np.dtype("<u2"), 2),
           "F16": (np.dtype("<f2"), 2), "I32": (np.dtype("<i4"), 4)}
_OF_NUMPY = {np.dtype("float32"): "F32", np.dtype("int32"): "I32", np.dtype("float16"): "F16"}


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file of the supported dtypes."""


# The most bytes one tensor of an inputs file may hold, as `sparse3d run --inputs` allows
# (src/apps/inputs_file.h): refused from the header, before anything is allocated or read.
MAX_TENSOR_BYTES = 2 << 30


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise SafetensorsError(f"the header names {twice[0]!r} twice")
    return dict(pairs)


def _integer(value) -> bool:
    return type(value) is int   # not bool, not float, not str


def read_header(path: str, max_header_bytes: int = 1 << 20) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """(entries by name: {dtype, shape, data_offsets}, metadata, data start) of a file,
    validated: a regular file, the header's size, JSON with each name once, every entry's
    dtype, shape and offsets (integers) inside the file and apart from the others' (no two
    tensors share bytes), sizes that match the shapes, at most MAX_TENSOR_BYTES a tensor."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise SafetensorsError(f"safetensors file {path}: not a regular file")
    size = st.st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(f"safetensors file {path}: {size} bytes, shorter than the "
                                   f"8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > max_header_bytes or 8 + n > size:
            raise SafetensorsError(f"safetensors file {path}: header of {n} bytes (the file "
                                   f"has {size}; at most {max_header_bytes} taken)")
        try:
            header = json.loads(f.read(n).decode("utf-8"), object_pairs_hook=_unique_keys)
        except SafetensorsError as e:
            raise SafetensorsError(f"safetensors file {path}: {e}") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise SafetensorsError(f"safetensors file {path}: the header is not JSON "
                                   f"({str(e)[:200]})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"safetensors file {path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise SafetensorsError(f"safetensors file {path}: __metadata__ is not an object")
    data_start, data_size = 8 + n, size - 8 - n
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"safetensors file {path}: entry '{name}' is not "
                                   f"{{dtype, shape, data_offsets}}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in _STORED:
            raise SafetensorsError(f"safetensors file {path}: '{name}' has dtype {dtype!r} "
                                   f"(supported: {', '.join(_STORED)})")
        if not isinstance(shape, list) or not all(_integer(d) and d >= 0 for d in shape):
            raise SafetensorsError(f"safetensors file {path}: '{name}' has shape {shape!r} "
                                   f"(a list of non-negative integers)")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_integer, offsets)):
            raise SafetensorsError(f"safetensors file {path}: '{name}' has data_offsets "
                                   f"{offsets!r} (two integers [begin, end])")
        begin, end = offsets
        want = math.prod(shape) * _STORED[dtype][1]   # Python integers: no wrap-around
        if want > MAX_TENSOR_BYTES:
            raise SafetensorsError(f"safetensors file {path}: '{name}' {dtype}{shape} would "
                                   f"hold {want} bytes, more than the {MAX_TENSOR_BYTES} an "
                                   f"inputs tensor may")
        if not (0 <= begin <= end <= data_size) or end - begin != want:
            raise SafetensorsError(f"safetensors file {path}: '{name}' {dtype}{shape} has "
                                   f"data_offsets [{begin}, {end}] ({want} bytes expected, "
                                   f"{data_size} bytes of data in the file)")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError(f"safetensors file {path}: '{n0}' [{b0}, {e0}] and '{n1}' "
                                   f"[{b1}, {e1}] share bytes")
    return header, metadata, data_start


def load(path: str, entry: dict, data_start: int) -> np.ndarray:
    """One tensor of read_header()'s entries as a NumPy array: F32, F16 and I32 as stored,
    BF16 as float32 (exact)."""
    stored, _ = _STORED[entry["dtype"]]
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(data_start + begin)
        raw = f.read(end - begin)
    a = np.frombuffer(raw, dtype=stored).reshape(entry["shape"])
    if entry["dtype"] == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))


def read(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """Every tensor of a file (load()'s dtypes) and its metadata."""
    header, metadata, start = read_header(path)
    return {name: load(path, e, start) for name, e in header.items()}, metadata


def write(path: str, tensors: Mapping[str, np.ndarray],
          metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes float32, float16 and int32 arrays (4-byte dtypes first, so that every tensor
    is aligned to its element size) with string metadata; the header is padded with spaces
    to a multiple of 8 bytes. Written atomically (write_atomic)."""
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    for k, v in arrays.items():
        if v.dtype not in _OF_NUMPY:
            raise SafetensorsError(f"write {path}: '{k}' has dtype {v.dtype} "
                                   f"(float32, float16 or int32)")
    order = sorted(arrays, key=lambda k: -arrays[k].dtype.itemsize)
    header: Dict[str, object] = {}
    offset = 0
    for k in order:
        nbytes = arrays[k].nbytes
        header[k] = {"dtype": _OF_NUMPY[arrays[k].dtype], "shape": list(arrays[k].shape),
                     "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    def body(f):
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for k in order:
            f.write(arrays[k].astype(arrays[k].dtype.newbyteorder("<"), copy=False).tobytes())
    write_atomic(path, body)


def write_atomic(path: str, body) -> None:
    """Calls body(file) on a new file beside `path` and renames it to `path`: a reader never
    sees half a file, a failure (a full disk) leaves nothing behind, and a symbolic link
    planted at `path` or at a temporary name is replaced, never written through (the
    temporary's name is random and created exclusively)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            body(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.filename is None:   # name what could not be written
            raise OSError(e.errno, f"cannot write {path}: {e.strerror}") from None
        raise
