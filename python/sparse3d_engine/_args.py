"""Argument checks of the package (Engine, the drop-in, the torch ops): each value taken as it
is or refused with an Error naming the argument."""
import math
import operator
import os

from ._native import Error

# Numbers are taken as they are or refused, never changed on the way in: int(2.7) would run 2
# steps, int("3") would read text as a count, and a value past the C++ type's range would
# fail in the binding with a message naming nothing. Integers are Python ints or integer
# scalars (NumPy's, torch's: anything with __index__), never bools or floats; real numbers
# are ints or floats (NumPy's too), never strings or bools. Every refusal is an Error naming
# the argument, as the engine's own argument errors are.

_INT32 = (-2**31, 2**31 - 1)
_INT64 = (-2**63, 2**63 - 1)
_UINT64 = (0, 2**64 - 1)


def _is_bool(value):
    # bool and NumPy's bool (numpy.bool_, not a bool subclass): a flag, never a count.
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and
                                       type(value).__name__ in ("bool", "bool_", "bool8"))


def _integer(value, name, lo, hi):
    """`value` as an int in [lo, hi], or an Error naming `name`."""
    if _is_bool(value) or isinstance(value, (str, bytes)) or not hasattr(type(value), "__index__"):
        raise Error(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    try:
        n = operator.index(value)
    except TypeError:   # e.g. a float tensor, whose __index__ refuses
        raise Error(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if not lo <= n <= hi:
        raise Error(f"{name} must be an integer in [{lo}, {hi}], got {n}")
    return n


def _real(value, name, finite=True):
    """`value` as a float (finite unless `finite` is False), or an Error naming `name`."""
    if _is_bool(value) or isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
        raise Error(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    x = float(value)
    if finite and not math.isfinite(x):
        raise Error(f"{name} must be finite, got {x}")
    return x


def _flag(value, name):
    """`value` as a bool: True or False (NumPy's too), not a number or a string."""
    if not _is_bool(value):
        raise Error(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def _text(value, name, path=False):
    """A str (or, with `path`, an os.PathLike) as it is: str() would make None the text
    "None"."""
    if isinstance(value, str):
        return value
    if path and isinstance(value, os.PathLike):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    kind = "a str or an os.PathLike" if path else "a str"
    raise Error(f"{name} must be {kind}, got {value!r} ({type(value).__name__})")


def _optional_text(value, name):
    """None or a str, as it is (an execution path, a progress bar's name)."""
    return None if value is None else _text(value, name)


def _engine_options(path, device, device_index, max_device_memory_gib, cache_dir,
                    persist_qualification, qualify_m, devices=(), parallel_min_tokens=8192):
    """The native engine's options, checked (Engine() and Engine.from_state_dict())."""
    if isinstance(qualify_m, (str, bytes)) or not hasattr(qualify_m, "__iter__"):
        raise Error(f"qualify_m must be a sequence of integers, got {qualify_m!r}")
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise Error(f"devices must be a sequence of CUDA device ordinals, got {devices!r}")
    devices = [_integer(d, "devices", 0, _INT32[1]) for d in devices]
    twice = sorted({d for d in devices if devices.count(d) > 1})
    if twice:
        raise Error(f"devices: device {twice[0]} is listed twice")
    qualify_m = [_integer(m, "qualify_m", *_INT64) for m in qualify_m]
    for m in qualify_m:
        if not 1 <= m <= 1 << 20:
            raise Error(f"qualify_m: candidate M must be in [1, 1048576], got {m}")
    return dict(path=_text(path, "path"), device=_text(device, "device"),
                devices=devices,
                parallel_min_tokens=_integer(parallel_min_tokens, "parallel_min_tokens", 1,
                                             _INT64[1]),
                device_index=_integer(device_index, "device_index", 0, _INT32[1]),
                max_device_memory_gib=_real(max_device_memory_gib, "max_device_memory_gib"),
                cache_dir=_text(cache_dir, "cache_dir", path=True),
                persist_qualification=_flag(persist_qualification, "persist_qualification"),
                qualify_m=qualify_m)
