"""python -m sparse3d_engine, and the `sparse3d-engine` console script: the `sparse3d` command
line from the installed wheel alone (no build tree, no `sparse3d` executable).

Both run the C++ command line itself through the native module (`_native.command_line`): the
same commands, options, checks, messages, exit codes, file readers and writers as the
`sparse3d` executable (docs/CLI.md), e.g.

    python -m sparse3d_engine info
    python -m sparse3d_engine make-checkpoint --preset tiny --out ckpts/tiny
    python -m sparse3d_engine run --checkpoint ckpts/tiny.json --tokens 1024 --out out

Errors are one line, "sparse3d-engine: error: ...": exit status 1 for bad data, 2 for a usage
error. Ctrl-C ends the process by the signal after removing what the command had under way.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Optional, Sequence

# The name error lines carry, and the program the usage lines show: what the user typed.
NAME = "sparse3d-engine"


def _program() -> str:
    return ("sparse3d-engine" if os.path.basename(sys.argv[0] or "") == "sparse3d-engine"
            else "python -m sparse3d_engine")


def _printable(text: str) -> str:
    """`text` with its control characters written as \\xNN, as the command line writes them."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7f else c for c in text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C before the command line took the signals over (while Python imports): end
        # by the signal, as the command does, without a traceback.
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130  # where the signal does not end the process


def _main(argv: Optional[Sequence[str]]) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # The package loads the CUDA libraries the module needs (_loader) before the module.
        import sparse3d_engine
        from sparse3d_engine import _native
    except ImportError as e:
        print(f"{NAME}: error: {_printable(str(e))}", file=sys.stderr)
        return 1
    # The engine's messages (fallbacks) go to stderr as lines, as the executable prints them,
    # not to the package's logger.
    _native.set_message_sink(None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return int(_native.command_line([os.fsencode(a) for a in [_program(), *args]], NAME))
    finally:
        _native.set_message_sink(sparse3d_engine._on_message)


if __name__ == "__main__":
    sys.exit(main())
