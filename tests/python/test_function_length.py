"""No function in src/, include/ or python/ is longer than 80 lines (docs/DESIGN.md), measured
by tools/function_length.py, whose C++ scan is checked here on small sources first."""
import os

import pytest

import function_length  # tools/ is on the path (conftest)


def _cxx(tmp_path, text):
    p = tmp_path / "f.cpp"
    p.write_text(text)
    return [(first, n) for first, n, _ in function_length.cxx_functions(str(p))]


def test_the_cxx_scan_measures_functions_and_not_their_blocks(tmp_path):
    body = "\n".join(f"  x += {i};" for i in range(5))
    src = (f"// a comment with {{ braces }}\nnamespace a {{\nstruct S {{ int v; }};\n"
           f"int f(int x) const noexcept {{\n  if (x) {{\n{body}\n  }}\n"
           f"  auto g = [&](int y) {{ return y; }};\n  const char* s = \"}}\";\n  return x;\n}}\n"
           f"S::S(int v)\n    : v_(v) {{\n  for (;;) {{ break; }}\n}}\n}}  // namespace a\n")
    assert _cxx(tmp_path, src) == [(4, 12), (16, 4)]


def test_a_long_function_is_reported(tmp_path):
    long_body = "\n".join(f"  x += {i};" for i in range(90))
    p = tmp_path / "long.cpp"
    p.write_text(f"int f(int x) {{\n{long_body}\n  return x;\n}}\n")
    found = function_length.too_long([str(p)], 80)
    assert [(n, first) for n, _, first, _ in found] == [(93, 1)]


def test_no_function_in_the_sources_is_over_80_lines():
    roots = [os.path.join(function_length.ROOT, d) for d in ("src", "include", "python")]
    if not all(os.path.isdir(r) for r in roots):
        pytest.skip("no source tree next to these tests (an installed copy of the suite)")
    long = function_length.too_long(roots, 80)
    assert not long, "split these (tools/function_length.py): " + "; ".join(
        f"{path}:{first} ({n} lines)" for n, path, first, _ in long)
