"""A small safetensors reader and writer over NumPy, for `python -m sparse3d_engine run`
(its --inputs file and its output). Only what those need: F32, BF16, F16 and I32 tensors,
read whole into host memory. BF16 is read as float32 (exact: bf16 is the upper half of an
f32) since NumPy has no bfloat16.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

# safetensors dtype -> (NumPy dtype as stored, bytes per element)
_STORED: Dict[str, Tuple[np.dtype, int]] = {"F32": (np.dtype("<f4"), 4), "BF16": (np.dtype("<u2"), 2),
           "F16": (np.dtype("<f2"), 2), "I32": (np.dtype("<i4"), 4)}
_OF_NUMPY = {np.dtype("float32"): "F32", np.dtype("int32"): "I32", np.dtype("float16"): "F16"}


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file of the supported dtypes."""


def read_header(path: str, max_header_bytes: int = 1 << 20) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """(entries by name: {dtype, shape, data_offsets}, metadata, data start) of a file,
    validated: the header's size, JSON, every entry's dtype, shape and offsets inside the
    file, and sizes that match the shapes."""
    size = os.path.getsize(path)
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
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"safetensors file {path}: the header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"safetensors file {path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start, data_size = 8 + n, size - 8 - n
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"safetensors file {path}: entry '{name}' is not "
                                   f"{{dtype, shape, data_offsets}}")
        if entry["dtype"] not in _STORED:
            raise SafetensorsError(f"safetensors file {path}: '{name}' has dtype {entry['dtype']} "
                                   f"(supported: {', '.join(_STORED)})")
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SafetensorsError(f"safetensors file {path}: '{name}' has shape {shape!r}")
        begin, end = entry["data_offsets"]
        want = int(np.prod(shape, dtype=np.int64)) * _STORED[entry["dtype"]][1]
        if not (0 <= begin <= end <= data_size) or end - begin != want:
            raise SafetensorsError(f"safetensors file {path}: '{name}' {entry['dtype']}{shape} has "
                                   f"data_offsets [{begin}, {end}] ({want} bytes expected, "
                                   f"{data_size} bytes of data in the file)")
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
    to a multiple of 8 bytes. Written to PATH.tmp and renamed: a reader never sees half a
    file."""
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
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for k in order:
            f.write(arrays[k].astype(arrays[k].dtype.newbyteorder("<"), copy=False).tobytes())
    os.replace(tmp, path)
