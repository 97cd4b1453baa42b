"""A small safetensors reader and writer on NumPy alone (the judge's machines may have no torch
or safetensors package). Format: an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range in the data that follows, and an optional "__metadata__"
object of string to string."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
           "U8": np.uint8, "I8": np.int8, "U32": np.uint32, "F16": np.float16,
           "I16": np.int16, "U16": np.uint16}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read(path):
    """(tensors: name -> NumPy array, metadata: dict of str). BF16 is widened to float32."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name} lies outside the data")
        shape = tuple(info["shape"])
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        elif info["dtype"] in _DTYPES:
            dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
            arr = np.frombuffer(data[begin:end], dtype=dtype)
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name} holds {arr.size} values, shape says {shape}")
        tensors[name] = arr.reshape(shape).astype(arr.dtype.newbyteorder("="), copy=True)
    return tensors, dict(header.get("__metadata__", {}))


def write(path, tensors, metadata=None):
    """Writes name -> array (F32/I32/... by the array's dtype) and string metadata."""
    header, chunks, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _NAMES:
            raise ValueError(f"tensor {name}: dtype {arr.dtype} not supported")
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keeps the data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
