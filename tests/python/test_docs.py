"""One truth in the docs: what README.md, docs/API.md, docs/PYTHON.md, docs/CLI.md and
docs/BENCHMARK.md say of the default execution path and of the option ranges is what the
code does. The sentences are matched where each document states them; a document that
changes its wording must keep a statement this test finds (it fails when one is missing)."""
import os
import re
import subprocess

import pytest

import sparse3d_engine as s3d

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = {name: os.path.join(ROOT, name) for name in
        ("README.md", "docs/API.md", "docs/PYTHON.md", "docs/CLI.md", "docs/BENCHMARK.md")}
CLI = os.environ.get("SPARSE3D_CLI")

pytestmark = pytest.mark.skipif(not all(os.path.exists(p) for p in DOCS.values()),
                                reason="the repository's docs are not beside these tests")


def text(name):
    with open(DOCS[name], encoding="utf-8") as f:
        return f.read()


# Where each document names the default path: the path is the capture.
DEFAULT_PATH_STATEMENTS = {
    "README.md": r"`run` uses by default the engine's default path, `([a-z_+-]+)`",
    "docs/API.md": r"\| `path` \| `\"\"` = `([a-z_+-]+)` \(`sparse3d::default_path\(\)`",
    "docs/PYTHON.md": r"s3d\.Engine\(\"ckpts/[^\"]+\"\)\s+# path \"([a-z_+-]+)\"",
    "docs/CLI.md": r"default path \(`sparse3d::default_path\(\)`, `([a-z_+-]+)`",
    "docs/BENCHMARK.md": r"`sparse3d::default_path\(\)` \(`([a-z_+-]+)`\)",
}


@pytest.mark.parametrize("name", sorted(DEFAULT_PATH_STATEMENTS))
def test_every_document_names_the_default_path_the_code_has(name):
    found = re.findall(DEFAULT_PATH_STATEMENTS[name], text(name))
    assert found, f"{name}: no statement of the default path ({DEFAULT_PATH_STATEMENTS[name]})"
    assert set(found) == {s3d.default_path()}, (name, found, s3d.default_path())


def test_no_document_calls_another_path_the_default():
    others = [p["name"] for p in s3d.paths() if p["name"] != s3d.default_path()]
    pattern = re.compile(r"(?:default path|path[^.\n]{0,12}default)[^.\n]{0,40}`(" +
                         "|".join(map(re.escape, others)) + r")`(?![-+])")
    for name in DOCS:
        for m in pattern.finditer(text(name)):
            pytest.fail(f"{name}: {m.group(0)!r} names {m.group(1)} as a default; the default "
                        f"path is {s3d.default_path()}")


def _cli_ranges():
    """docs/CLI.md's table of numeric options: {option: the range text}."""
    rows = re.findall(r"^\| `(--[a-z-]+)`[^|]*\| ([^|]+) \|$", text("docs/CLI.md"), re.M)
    return {opt: desc for opt, desc in rows}


@pytest.mark.parametrize("option, low, high", [("--steps", 1, 10000), ("--qualify-m", 1, 1 << 20)])
def test_option_ranges_in_the_docs_are_the_enforced_ones(option, low, high):
    ranges = _cli_ranges()
    assert option in ranges, f"docs/CLI.md's table has no row for {option}"
    hi = {10000: "10000", 1 << 20: "2^20"}[high]
    assert f"[{low}, {hi}]" in ranges[option], (option, ranges[option])
    if not CLI:
        pytest.skip("SPARSE3D_CLI (the C++ command) not set: its --help not compared")
    helptext = subprocess.run([CLI, "run", "--help"], capture_output=True, text=True).stdout
    assert re.search(re.escape(option) + r"[^\n]*INT in \[" + f"{low}, {high}" + r"\]",
                     helptext), helptext
    for bad in (low - 1, high + 1):
        r = subprocess.run([CLI, "run", "--checkpoint", "x.json", "--manifest", "x.json",
                            option, str(bad)], capture_output=True, text=True)
        assert r.returncode == 2 and option in r.stderr, (option, bad, r.stderr)


def test_the_readmes_headline_table_is_what_its_json_says(capsys):
    """README's first table is printed by tools/pipeline_figure.py from the committed JSON of
    the measurement it cites; an edit by hand, or a JSON replaced without the table, fails."""
    import pipeline_figure   # tools/ is on the path (conftest)
    folder = os.path.join(ROOT, "bench", "results", "2026-12-02-h200-pipeline-memory-per-process")
    pipeline_figure.main(["--off", os.path.join(folder, "off_1024.json"),
                          "--on", os.path.join(folder, "on_1024.json"), "--date", "2026-12-02"])
    table = capsys.readouterr().out.strip()
    assert table.count("\n") >= 10
    assert table in text("README.md")
