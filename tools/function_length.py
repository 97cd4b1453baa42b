#!/usr/bin/env python3
"""Functions longer than a limit (80 lines: docs/DESIGN.md's rule) in the project's sources.

    python3 tools/function_length.py [--limit 80] [PATH...]   # default: src/ include/ python/

Python functions are measured with `ast` (first line of the `def` to the last of its body).
C++ and CUDA functions by a scan of the braces after comments, strings and character literals
are blanked: a `{` opens a function body when the text before it (since the last `;`, `{` or
`}`) ends in a parameter list, optionally followed by qualifiers, a trailing return type or a
constructor's initialiser list, and it is not a control statement, a lambda or a type; nested
bodies (lambdas, local classes) count as part of their function. Lines run from the
declaration's first line to the closing brace. Prints one line per function over the limit,
longest first; exits 1 when there is any.
"""
import argparse
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = (".cpp", ".cu", ".h", ".cuh", ".hpp")
CONTROL = re.compile(r"^(if|for|while|switch|catch|else|do|return)\b|[=,(]\s*\[[^\]]*\]\s*"
                     r"(\([^)]*\))?[^;{}]*$|^(namespace|struct|class|enum|union)\b|\boperator\s*$")
SIGNATURE_END = re.compile(r"\)\s*(const|noexcept|override|final|mutable|&|&&|\s)*"
                           r"(->[^;{}]*|:[^;{}]*)?$")


def _blank(text):
    """`text` with comments, strings and character literals replaced by blanks (newlines kept)."""
    keep_lines = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    text = re.sub(r'R"([^(\s]*)\(.*?\)\1"', keep_lines, text, flags=re.S)
    text = re.sub(r"/\*.*?\*/", keep_lines, text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])+'", "''", text)


def cxx_functions(path):
    """(first line, lines, first line's text) of each outermost function body in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    text = _blank(source)
    lines = source.split("\n")
    found, stack = [], []  # stack: (is_function, first line)
    line, stmt_start = 1, 0
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[stmt_start:i].strip()
            last = head.split("\n")[-1].strip() if head else ""
            inside = any(is_fn for is_fn, _ in stack)
            is_fn = (not inside and bool(head) and SIGNATURE_END.search(head) is not None
                     and not CONTROL.search(head) and not CONTROL.search(last))
            stack.append((is_fn, line - head.count("\n")))
            stmt_start = i + 1
        elif c == "}":
            if stack:
                is_fn, first = stack.pop()
                if is_fn:
                    found.append((first, line - first + 1, lines[first - 1].strip()))
            stmt_start = i + 1
        elif c == ";":
            stmt_start = i + 1
    return found


def python_functions(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.lineno, node.end_lineno - node.lineno + 1, node.name


def files_under(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in os.walk(p):
            for n in sorted(names):
                if n.endswith(CXX + (".py",)):
                    yield os.path.join(d, n)


def too_long(paths, limit):
    """(lines, path, first line, name) of every function over `limit` lines, longest first."""
    out = []
    for path in files_under(paths):
        measure = python_functions if path.endswith(".py") else cxx_functions
        for first, n, name in measure(path):
            if n > limit:
                out.append((n, os.path.relpath(path, ROOT), first, name))
    return sorted(out, reverse=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--limit", type=int, default=80)
    args = ap.parse_args(argv)
    paths = args.paths or [os.path.join(ROOT, d) for d in ("src", "include", "python")]
    long = too_long(paths, args.limit)
    for n, path, first, name in long:
        print(f"{n:5d} lines  {path}:{first}  {name[:80]}")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
