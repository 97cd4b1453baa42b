"""CPU checks of the benchmark's service protocol on the PyTorch side: run.py --service (the
warm-up at a token count outside the asset set, each asset's first call, the repeats, the
timing file `sparse3d bench` reads) and pipeline_e2e.py's service-order pieces that need no
TRELLIS.2 checkout (its synthetic assets and its table). Needs torch, numpy, safetensors and
pytest; a test function each, so pytest runs them:

  python3 tools/torch_ref/service_selftest.py      # = python3 -m pytest -q this file
"""
import contextlib
import io
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures  # noqa: E402
import pipeline_e2e  # noqa: E402
import run as run_cli  # noqa: E402


def _run(args):
    log = []
    with contextlib.redirect_stdout(io.StringIO()):
        run_cli.run(args, log=log.append)
    return log


def test_warmup_tokens_choice_matches_the_bench():
    # The same rule as bench/runner.h service_warmup_tokens (tests/cpu/test_bench_service.cpp).
    cells = 64 ** 3
    assert run_cli.service_warmup_tokens([3664, 30227], 0, cells) == 2748
    assert run_cli.service_warmup_tokens([3, 1, 2, 10], 0, 1000) == 4  # 1 * 3 // 4 = 0: up
    assert run_cli.service_warmup_tokens([1, 61, 250], 0, cells) == 2
    assert run_cli.service_warmup_tokens([100, 200], 150, 1000) == 150
    assert run_cli.service_warmup_tokens([100, 200], 250, 1000) == 250
    for bad in (100, 200, 1001, -1):
        try:
            run_cli.service_warmup_tokens([100, 200], bad, 1000)
            raise AssertionError(f"accepted {bad}")
        except ValueError as e:
            assert "warm" in str(e), str(e)


def test_service_protocol_timing_file():
    with tempfile.TemporaryDirectory() as d:
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), token_counts=(19, 30, 12),
                                           cond_tokens=6)
        timing = os.path.join(d, "t.json")
        log = _run(["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "2",
                    "--quiet", "--time", "--warmup", "1", "--repeat", "2", "--service",
                    "--timing-json", timing])
        with open(timing) as f:
            doc = json.load(f)
        assert doc["protocol"] == "service", doc["protocol"]
        # 3/4 of 12 = 9 tokens of the largest asset (30).
        assert doc["warmup_request"] == "the first 9 tokens of a01-random-30", \
            doc["warmup_request"]
        names = list(doc["assets"])
        assert names == ["a00-random-19", "a01-random-30", "a02-random-12"], names
        for name, e in doc["assets"].items():
            assert e["first_seconds"] > 0, (name, e)
            assert len(e["total_seconds"]) == 2 and len(e["call_seconds"]) == 2, e
            # The whole call includes sample()'s loop.
            assert all(c >= t for c, t in zip(e["call_seconds"], e["total_seconds"])), e
        # The order: the warm-up, every asset's first call, then the repeats.
        firsts = [i for i, line in enumerate(log) if line.startswith("first call")]
        warm = [i for i, line in enumerate(log) if line.startswith("warm-up")]
        repeats = [i for i, line in enumerate(log) if line.startswith("denoising")]
        assert len(firsts) == 3 and len(warm) == 1 and len(repeats) == 3, log
        assert warm[-1] < firsts[0] and firsts[-1] < repeats[0], log


def test_service_only_has_first_calls_and_outputs():
    with tempfile.TemporaryDirectory() as d:
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), token_counts=(19, 30),
                                           cond_tokens=6)
        timing = os.path.join(d, "t.json")
        _run(["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "2",
              "--quiet", "--warmup", "1", "--repeat", "0", "--service", "--warmup-tokens", "7",
              "--timing-json", timing, "--out", os.path.join(d, "out")])
        with open(timing) as f:
            doc = json.load(f)
        assert doc["warmup_request"] == "the first 7 tokens of a01-random-30"
        for e in doc["assets"].values():
            assert e["first_seconds"] > 0 and e["total_seconds"] == [], e
        assert os.path.exists(os.path.join(d, "out", "a00-random-19.safetensors"))


def test_raster_warmup_above_the_largest_asset():
    with tempfile.TemporaryDirectory() as d:
        args = dict(fixtures.TINY_ARGS, in_channels=fixtures.TINY_ARGS["out_channels"] + 3)
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), args=args,
                                           token_counts=(19, 30), cond_tokens=6,
                                           concat_channels=3)
        timing = os.path.join(d, "t.json")
        _run(["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "1",
              "--quiet", "--warmup", "1", "--repeat", "1", "--service", "--warmup-tokens", "40",
              "--timing-json", timing])
        with open(timing) as f:
            doc = json.load(f)
        assert doc["warmup_request"] == "the grid's first 40 voxels in raster order", doc
        assert all(e["first_seconds"] > 0 for e in doc["assets"].values())


def test_service_refusals():
    with tempfile.TemporaryDirectory() as d:
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), token_counts=(19, 30),
                                           cond_tokens=6)
        base = ["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "1",
                "--quiet"]
        for extra, needle in ((["--repeat", "0"], "--repeat 0"),
                              (["--service", "--compile", "blocks"], "--compile"),
                              (["--service", "--warmup", "1", "--warmup-tokens", "19"],
                               "an asset has that many tokens")):
            try:
                _run(base + extra)
                raise AssertionError(f"{extra} accepted")
            except (SystemExit, ValueError) as e:
                assert needle in str(e), (extra, str(e))


def test_dense_warmup_is_two_copies():
    with tempfile.TemporaryDirectory() as d:
        ckpt, man = fixtures.write_fixture(os.path.join(d, "in"), args=fixtures.TINY_SS_ARGS,
                                           model_name="SparseStructureFlowModel", assets=2,
                                           cond_tokens=5)
        timing = os.path.join(d, "t.json")
        _run(["--checkpoint", ckpt, "--manifest", man, "--device", "cpu", "--steps", "1",
              "--quiet", "--warmup", "1", "--repeat", "1", "--service", "--timing-json", timing])
        with open(timing) as f:
            doc = json.load(f)
        assert doc["warmup_request"].startswith("2 copies of "), doc["warmup_request"]
        assert all(e["first_seconds"] > 0 for e in doc["assets"].values())


def test_pipeline_service_assets_have_distinct_growing_counts():
    targets = [400, 900, 1500]
    assets = pipeline_e2e.service_assets(targets, warmup=250)
    names = list(assets)
    assert names[0] == "warm-up" and len(names) == 4, names
    counts = [len(assets[n]["coords64"]) for n in names]
    assert len(set(counts)) == 4, counts
    assert counts[1] < counts[2] < counts[3], counts
    for n, target in zip(names[1:], targets):
        # Within a few percent of the asked count (the bisection's resolution).
        assert abs(len(assets[n]["coords64"]) - target) <= 0.05 * target, (n, counts)
    # The 64-grid voxels' parents are the 32-grid ones, as asset_coords asserts.
    c32, c64 = assets[names[2]]["coords32"], assets[names[2]]["coords64"]
    assert torch.equal(torch.unique(c64[:, 1:] // 2, dim=0), c32[:, 1:])


def test_pipeline_service_table():
    stages = [s for s, *_ in pipeline_e2e.STAGES]
    rec = lambda t: {"stages": {s: {"seconds": t} for s in stages}, "wall_seconds": 4 * t}  # noqa: E731
    result = {"assets": {"warm-up": {"tokens": {"shape_1024": 250}},
                         "t400": {"tokens": {"shape_1024": 402}}},
              "service": {"warmup_asset": "warm-up", "order": ["t400"],
                          "pytorch": {"warm-up": rec(2.0), "t400": rec(1.0)},
                          "sparse3d": {"warm-up": rec(4.0), "t400": rec(0.5)}}}
    rows = pipeline_e2e.service_rows(result)
    assert [r["asset"] for r in rows] == ["warm-up", "t400", "geomean"], rows
    first, t400, geo = rows
    assert first["first_run"] and abs(first["speedup"] - 0.5) < 1e-12, first
    assert abs(t400["total_pytorch"] - 4.0) < 1e-12 and abs(t400["speedup"] - 2.0) < 1e-12
    assert abs(geo["speedup"] - 2.0) < 1e-12, geo
    text = pipeline_e2e.service_table(rows)
    assert "first run" in text and "2.00x" in text and "0.50x" in text, text


if __name__ == "__main__":
    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
