"""Progress bars: the process default (set_progress, SPARSE3D_ENGINE_PROGRESS), the drop-in's
rule, the tqdm bar and the native loop's callbacks."""
import os
import sys
from typing import Any, Callable, Optional, Tuple

from ._frameworks import _as_framework

Array = Any

# Off unless asked for (output nobody asked for, in a service's log). A bar follows the
# engine's progress report and never makes the GPU wait. The drop-in's samplers follow
# TRELLIS.2's `verbose` where stderr is a terminal.


def _progress_setting(text: Optional[str]) -> Optional[bool]:
    """SPARSE3D_ENGINE_PROGRESS: 1/true/on/yes on, 0/false/off/no off, else None (the
    defaults: sample() none, the drop-in's samplers where stderr is a terminal)."""
    value = (text or "").strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    return None


_progress_default: Optional[bool] = _progress_setting(os.environ.get("SPARSE3D_ENGINE_PROGRESS"))


def set_progress(enabled: bool) -> None:
    """Turns the default tqdm progress bar of sample() on or off for the process, the drop-in's
    samplers included (the initial value: off for sample(), the drop-in's where stderr is a
    terminal; SPARSE3D_ENGINE_PROGRESS=1 or 0 sets it). A call's `progress=` wins."""
    global _progress_default
    _progress_default = bool(enabled)


def progress_enabled() -> bool:
    """Whether sample() shows a bar by default (tqdm must also be installed)."""
    return _progress_default is True


def _pipeline_progress() -> bool:
    """Whether the drop-in's samplers show a bar when their `verbose` asks for one: as set, or
    (not set) where stderr is a terminal."""
    if _progress_default is not None:
        return _progress_default
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except Exception:  # noqa: BLE001 - a replaced stderr without isatty: no terminal
        return False


def _sample_hooks(callback: Optional[Callable[[int, float, Array], Any]], like: Array,
                  bar: Any) -> Tuple[Optional[Callable], Optional[Callable]]:
    """Engine.sample: the native loop's step callback (the user's, the latent in the inputs'
    framework) and progress callback (the bar's), each None where there is none."""
    on_step = None
    if callback is not None:
        def on_step(step, t, latent):
            callback(step, t, _as_framework(latent, like))
    on_progress = None
    if bar is not None:
        # Steps the device has finished, reported without making it wait (the host stays
        # one step ahead); a bar never synchronises the loop, unlike a step callback.
        shown = [0]

        def on_progress(done, total):
            bar.update(done - shown[0])
            shown[0] = done
    return on_step, on_progress


def _progress_bar(progress, total, desc="Sampling"):
    """A tqdm bar of `total` steps, or None: progress None follows set_progress(), False is
    none, True a bar named `desc`, a string a bar of that name. None without tqdm."""
    if progress is None:
        progress = _progress_default is True
    if progress is False:
        return None
    try:
        from tqdm.auto import tqdm  # a notebook's widget, a terminal's text bar
        bar = tqdm(total=int(total), desc=progress if isinstance(progress, str) else desc)
    except Exception:  # noqa: BLE001 - no tqdm, or a stand-in that is not one: no bar
        return None
    return bar if hasattr(bar, "update") and hasattr(bar, "close") else None
