"""Engines by id: every Engine has a process-unique int, `engine.id`, what the torch custom ops
take (torch_ops), since an op's arguments cannot be Python objects. Weak: the registry keeps
no engine alive. A look-up here is not a call into the Engine: the torch op finds its engine
here and then enters __init__.py once (Engine._sample)."""
import gc
import itertools
import weakref
from typing import TYPE_CHECKING, Any

from ._args import _INT64, _integer
from ._native import Error

if TYPE_CHECKING:  # pragma: no cover
    from . import Engine

_ENGINES: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_NEXT_ID = itertools.count(1)


def _register(engine: Any) -> int:
    """A new process-unique id for `engine`, which engine_by_id() finds while it lives."""
    engine_id = next(_NEXT_ID)
    _ENGINES[engine_id] = engine
    return engine_id


class _Released:
    """What an Engine holds in place of its native engine after the interpreter began to exit."""

    def __getattr__(self, name):
        raise Error("this engine was released at interpreter exit")


def _release_engines_at_exit() -> None:
    """Lets go of every native engine still alive when the interpreter exits (__init__.py
    registers this with atexit after the message sink's reset, so that it runs before it).
    Something may keep an Engine to the very end: torch.compile's caches under torch 2.6 hold
    the modules a compiled frame read, and they are never freed. An engine held there
    outlived the interpreter's teardown, with its device memory, and nanobind reported it
    (and its type's functions) leaked."""
    for engine in list(_ENGINES.values()):
        engine._e = _Released()
    gc.collect()


def engine_by_id(engine_id: int) -> "Engine":
    """The live Engine whose `id` is `engine_id` (Error when there is none)."""
    engine = _ENGINES.get(_integer(engine_id, "engine id", *_INT64))
    if engine is None:
        raise Error(f"no live sparse3d_engine.Engine has id {engine_id}")
    return engine


# Public as sparse3d_engine.engine_by_id.
engine_by_id.__module__ = "sparse3d_engine"
