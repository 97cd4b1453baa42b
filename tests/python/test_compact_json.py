"""tools/compact_json.py: the layout of the bench results' JSON, shared with the C++ writer
(io::dump_readable; tests/cpu/test_json.cpp reads the same tests/data/json_layout.json)."""
import glob
import json
import os

import pytest

import compact_json  # tools/ is on the path (conftest)
from conftest import DATA

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_the_layout_is_the_one_the_cpp_writer_uses():
    with open(os.path.join(DATA, "json_layout.json"), encoding="utf-8") as f:
        text = f.read()
    assert compact_json.dumps(json.loads(text)) + "\n" == text


def test_a_rewrite_keeps_every_number_as_written_and_the_key_order(tmp_path):
    p = tmp_path / "r.json"
    samples = ", ".join(f"{i}.10" for i in range(40))
    p.write_text('{"z": 0.10, "a": [1e5, 1.0, -0, 2E-3], "big": 18446744073709551615,\n'
                 f'"s": [{samples}], "t": "x, y: z"}}')
    assert compact_json.rewrite(str(p)) is False          # it was not in the layout
    text = p.read_text()
    assert text.index('"z"') < text.index('"a"') < text.index('"big"')
    assert '"z": 0.10' in text and "[1e5, 1.0, -0, 2E-3]" in text
    assert "18446744073709551615" in text and '"t": "x, y: z"' in text
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert json.loads(text)["s"][39] == 39.1
    assert compact_json.rewrite(str(p)) is True           # and now it is: nothing changes
    assert p.read_text() == text


def test_a_file_that_is_not_json_is_named_and_left_alone(tmp_path, capsys):
    p = tmp_path / "log.json"
    p.write_text("loaded tiny.json in 0.4 s\n")
    assert compact_json.main([str(p)]) == 1
    assert "log.json: not JSON" in capsys.readouterr().err
    assert p.read_text() == "loaded tiny.json in 0.4 s\n"


def test_check_names_a_file_out_of_the_layout_without_changing_it(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"a": list(range(100))}, indent=2))
    before = p.read_text()
    assert compact_json.main(["--check", str(p)]) == 1
    assert "not in the layout" in capsys.readouterr().out
    assert p.read_text() == before


def test_every_committed_bench_result_is_in_the_layout():
    files = sorted(glob.glob(os.path.join(ROOT, "bench", "results", "**", "*.json"),
                             recursive=True))
    if not files:
        pytest.skip("no bench/results next to these tests (an installed copy of the suite)")
    off = [f for f in files if not compact_json.rewrite(f, check_only=True)]
    assert not off, "run python3 tools/compact_json.py on: " + " ".join(off)
