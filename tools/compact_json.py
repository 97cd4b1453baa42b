#!/usr/bin/env python3
"""JSON for files a person reads, in the layout the bench's C++ writer uses (io::dump_readable):
what fits on a line of about 100 characters stays on it; in what does not, the entries that fit
on a line share lines of about 100 characters and the others start lines of their own.

    python3 tools/compact_json.py FILE...      # rewrites each file in place, numbers verbatim
    python3 tools/compact_json.py --check FILE # exit 1 where a file is not in this layout

As a module, `dumps(value)` gives the text and `dump(value, file)` writes it; the bench scripts
under tools/ write their results with it. Rewriting keeps every number's text as it was written
(0.10 stays 0.10) and the keys in their order, and checks that the file reads back to the same
value before replacing it.
"""
import argparse
import json
import os
import sys
import tempfile

WIDTH = 100


class _Number(str):
    """A number's text as read, written back unchanged."""


def _is_scalar(v):
    return not isinstance(v, (dict, list))


def _one_line(v):
    if isinstance(v, _Number):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_one_line(k)}: {_one_line(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_one_line(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False, allow_nan=False, default=str)


def _dump(v, indent, depth, column, out):
    text = _one_line(v)
    if _is_scalar(v) or not v or column + len(text) <= WIDTH:
        out.append(text)
        return
    pad = " " * (indent * (depth + 1))
    entries = []  # (text, spans lines)
    for k, x in (v.items() if isinstance(v, dict) else ((None, x) for x in v)):
        head = "" if k is None else _one_line(str(k)) + ": "
        parts = [head]
        _dump(x, indent, depth + 1, len(pad) + len(head), parts)
        t = "".join(parts)
        entries.append((t, "\n" in t))
    opening, closing = ("{", "}") if isinstance(v, dict) else ("[", "]")
    out.append(opening + "\n" + pad)
    line, tall = len(pad), False
    for i, (t, spans) in enumerate(entries):
        if i > 0:
            wrap = tall or spans or line + 2 + len(t) > WIDTH
            out.append(",\n" + pad if wrap else ", ")
            line = len(pad) if wrap else line + 2
        out.append(t)
        line = len(t) - t.rfind("\n") - 1 if spans else line + len(t)
        tall = spans
    out.append("\n" + " " * (indent * depth) + closing)


def dumps(value, indent=1):
    """`value` as text in the readable layout (no trailing newline)."""
    out = []
    _dump(value, indent, 0, 0, out)
    return "".join(out)


def dump(value, f, indent=1):
    f.write(dumps(value, indent) + "\n")


def _read_verbatim(text):
    return json.loads(text, parse_float=_Number, parse_int=_Number,
                      parse_constant=lambda c: _Number(c))


def rewrite(path, check_only=False):
    """Rewrites `path` in the readable layout; returns True where it was already in it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        value = _read_verbatim(text)
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    new = dumps(value) + "\n"
    if new == text:
        return True
    if check_only:
        return False
    if json.loads(new) != json.loads(text):
        raise SystemExit(f"compact_json: {path}: the rewritten text reads back differently")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".json.tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)
    return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--check", action="store_true", help="only report files not in the layout")
    args = ap.parse_args(argv)
    off, unread = [], []
    for p in args.files:
        try:
            if not rewrite(p, check_only=args.check):
                off.append(p)
        except ValueError as e:
            unread.append(p)
            print(f"compact_json: {e}", file=sys.stderr)
    for p in off:
        print(("not in the layout: " if args.check else "rewrote: ") + p)
    return 1 if unread or (args.check and off) else 0


if __name__ == "__main__":
    sys.exit(main())
