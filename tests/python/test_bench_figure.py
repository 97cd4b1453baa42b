"""tools/bench_figure.py on every committed `sparse3d bench` result (bench/results/*.json with
schema "sparse3d-bench/1"): the title says what was measured in words, every bar carries its
speedup, and where matplotlib is installed a PNG is written with no text outside its frame.
CI's environment (scripts/setup.sh) installs no matplotlib: there the drawing test skips and
the title and bar tests, which need none, still run."""
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_figure  # noqa: E402

RESULTS = [p for p in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.json")))
           if json.load(open(p)).get("schema") == bench_figure.SCHEMA]


def test_committed_results_are_found():
    assert len(RESULTS) >= 15


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_title_says_what_was_measured(path):
    result = bench_figure.load(path)
    text = "\n".join(bench_figure.title(result, "synthetic weights"))
    for part in ("denoise latency per request", "parameter", "synthetic weights", "steps",
                 "CFG 7.5", "NVIDIA H200", result["date"][:10]):
        assert part in text, (part, text)
    assert ".json" not in text  # the model in words, not a file name
    # Without --weights, an older result says that it lacks the record rather than guessing.
    assert "weights not recorded" in "\n".join(bench_figure.title(result))


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_every_bar_has_its_speedup(path):
    result = bench_figure.load(path)
    ref = result["derived"]["reference_path"]
    for set_name in result["derived"]["sets"]:
        for path_name, latency, n, of, vs in bench_figure.bars(result, set_name):
            assert latency > 0
            text = bench_figure.label(path_name, ref, n, of, vs)
            assert ("reference" in text) == (path_name == ref)
            if path_name != ref:
                assert "x vs %s" % ref in text, text


def test_title_of_a_recorded_result():
    s = {"checkpoint": "/x/shape.json", "model_parameters": 1292253728, "protocol": "both",
         "steps": 12, "guidance": 7.5, "guidance_interval": [0.6, 1.0], "guidance_rescale": 0.7,
         "weights": {"generator": "sparse3d make-checkpoint", "seed": "1"},
         "model": {"family": "SLatFlowModel", "num_blocks": 30, "model_channels": 1536,
                   "num_heads": 12}}
    r = {"settings": s, "fingerprint": {"gpu_name": "NVIDIA H200"}, "date": "2026-12-02T01:00Z",
         "assets": [{"tokens": 3664}, {"tokens": 30227}]}
    assert bench_figure.title(r, "ignored: the result records it") == [
        "sparse3d bench, denoise latency per request: SLatFlowModel (30 blocks, C 1536, "
        "12 heads), 1.29B parameters, synthetic weights (seed 1)",
        "service + repeated protocols, 12 steps, CFG 7.5 on t in [0.6, 1], rescale 0.7; "
        "2 assets (3,664-30,227 tokens); NVIDIA H200, 2026-12-02"]


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_draws_a_png_inside_its_frame(path, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (CI installs none; "
                        "scripts/setup.sh): tools/bench_figure.py cannot draw here")
    out = tmp_path / "fig.png"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_figure.py"), path,
                          "--out", str(out), "--svg"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "fig.svg").exists()


def test_refuses_what_is_not_a_bench_result(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text('{"rows": []}')
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_figure.py"),
                          str(bad)], capture_output=True, text=True)
    assert run.returncode != 0 and "not a sparse3d bench result" in run.stderr
