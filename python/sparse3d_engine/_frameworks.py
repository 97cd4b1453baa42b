"""Arrays of the frameworks the package serves (torch, NumPy, CuPy, JAX): which framework a
value is from, results back in the inputs' framework, CUDA streams, array arguments."""
import sys

from ._args import _UINT64, _integer, _is_bool
from ._native import Error

# cudaStreamLegacy: what a framework's "default stream" handle 0 means; the engine runs such
# work on its own stream, ordered by events (docs/PYTHON.md, "Streams").
_CUDA_STREAM_LEGACY = 1

def _framework(x):
    """'torch', 'numpy', 'cupy', 'jax' or None, from the type's module (importing nothing)."""
    module = type(x).__module__.split(".")[0]
    if module in ("torch", "numpy", "cupy"):
        return module
    if module in ("jax", "jaxlib"):
        return "jax"
    return None


def _as_framework(array, like):
    """The engine's DLPack result as a tensor of `like`'s framework (a view, no copy)."""
    if array is None:
        return None
    kind = _framework(like)
    if kind == "torch":
        return sys.modules["torch"].from_dlpack(array)
    if kind == "numpy":
        return sys.modules["numpy"].from_dlpack(array)
    if kind == "cupy":
        return sys.modules["cupy"].from_dlpack(array)
    if kind == "jax":
        return sys.modules["jax"].dlpack.from_dlpack(array)
    return array


def _float_array(values, like):
    """A float32 array of `values` in `like`'s framework and device (the forward's t)."""
    kind = _framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        return torch.tensor(values, dtype=torch.float32, device=like.device)
    if kind == "cupy":
        return sys.modules["cupy"].asarray(values, dtype="float32")
    import numpy
    return numpy.asarray(values, dtype=numpy.float32)


def _stream(stream, tensors):
    """The CUDA stream handle the request runs on. None: the current stream of the inputs'
    framework (torch, CuPy) when they are on a GPU, else the engine's own stream."""
    if stream is not None:
        if isinstance(stream, int) and not _is_bool(stream):
            handle = stream
        elif hasattr(stream, "cuda_stream"):   # torch.cuda.Stream
            handle = stream.cuda_stream
        elif hasattr(stream, "ptr"):           # cupy.cuda.Stream
            handle = stream.ptr
        else:
            raise Error(f"stream must be an int handle, a torch.cuda.Stream or a "
                        f"cupy.cuda.Stream, got {type(stream).__name__}")
        return _integer(handle, "stream", *_UINT64) or _CUDA_STREAM_LEGACY
    for t in tensors:
        kind = _framework(t)
        if kind == "torch" and t.is_cuda:
            torch = sys.modules["torch"]
            return torch.cuda.current_stream(t.device).cuda_stream or _CUDA_STREAM_LEGACY
        if kind == "cupy":
            cupy = sys.modules["cupy"]
            return cupy.cuda.get_current_stream().ptr or _CUDA_STREAM_LEGACY
    return 0


def _feats(x):
    """A SparseTensor's features (duck typing: `.feats`), or x itself."""
    return x.feats if hasattr(x, "feats") else x


def _tensor_like(x):
    """Whether `x` can be a tensor argument of the engine (an array with a shape and a dtype;
    the engine checks the rest), not a list or a number. A tensor of a known framework is
    told by its type alone (what torch.compile traces in a model's call)."""
    if _framework(x) is not None:
        return True
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _array(value, name, optional=False):
    """`value` as it is when it is an array (a DLPack producer with a shape: a torch, NumPy,
    CuPy or JAX array), or None when `optional`; else an Error naming `name`. A list, a dict
    or a number is not an array: the engine reads its inputs in place, never converted."""
    if value is None:
        if optional:
            return None
        raise Error(f"{name} is required (an array), got None")
    if hasattr(value, "shape") and (hasattr(type(value), "__dlpack__") or
                                    _framework(value) is not None):
        return value
    raise Error(f"{name} must be an array (a torch, NumPy, CuPy or JAX array), got "
                f"{type(value).__name__}")


def _out_array(value, name):
    """A caller's buffer for a result: None, or a writable array (the engine writes into it)."""
    _array(value, name, optional=True)
    flags = getattr(value, "flags", None)   # NumPy's (and CuPy's) writeable flag
    if value is not None and flags is not None and getattr(flags, "writeable", True) is False:
        raise Error(f"{name} is read-only (the engine writes the result into it); pass a "
                    f"writable array")
    return value


# ---- Torch operands ----------------------------------------------------------------------
# The casts the original models make, done once, where the engine is called with torch
# tensors (the torch ops, and the drop-in where torch has no custom ops): f16 values are exact
# in f32; the coordinates int32; t f32 with one value per asset; all contiguous.

def _torch_contiguous(*tensors):
    return tuple(None if t is None else t.contiguous() for t in tensors)


def _torch_conditions(cond, concat):
    """cond f32 where it is f16 (bf16 and f32 as they are), concat_cond f32."""
    torch = sys.modules["torch"]
    if cond.dtype == torch.float16:
        cond = cond.float()
    if concat is not None and concat.dtype != torch.float32:
        concat = concat.float()
    return cond, concat


def _torch_forward_operands(x, t, cond, concat=None, coords=None):
    """Engine.forward's operands from torch tensors: x f32 unless bf16 or f32, t (a number or a
    tensor) f32 [B] on x's device (one value broadcast over the B assets of cond)."""
    torch = sys.modules["torch"]
    if x.dtype not in (torch.float32, torch.bfloat16):
        x = x.float()
    cond, concat = _torch_conditions(cond, concat)
    if coords is not None and coords.dtype != torch.int32:
        coords = coords.int()
    batch = int(cond.shape[0]) if cond.dim() == 3 else 1
    if not torch.is_tensor(t):
        t = torch.full((batch,), float(t), dtype=torch.float32, device=x.device)
    t = t.to(dtype=torch.float32, device=x.device).reshape(-1)
    if t.numel() == 1 and batch > 1:
        t = t.expand(batch)
    return _torch_contiguous(x, t, cond, concat, coords)


def _torch_sample_operands(coords, noise, cond, concat=None):
    """Engine.sample's operands from torch tensors: the noise f32, the coordinates int32."""
    torch = sys.modules["torch"]
    if coords is not None and coords.dtype != torch.int32:
        coords = coords.int()
    if noise is not None and noise.dtype != torch.float32:
        noise = noise.float()
    cond, concat = _torch_conditions(cond, concat)
    return _torch_contiguous(coords, noise, cond, concat)
