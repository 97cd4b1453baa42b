"""The engine's messages through Python logging: a fallback (a fast path refused) is a
record on the "sparse3d_engine" logger and a line to the engine's `log` callable, never a
line the C++ side prints to stderr; start-up lines go to the logger at INFO. On the CPU
backend, path "beyond" asks for CUDA graphs, which it refuses: a fallback on every first
request of an engine."""
import logging
import os
import subprocess
import sys
import threading

import numpy as np

import sparse3d_engine as s3d
from conftest import TINY, make_request

QUICK = s3d.SamplerSettings(steps=2, guidance_interval=(0.0, 1.0))
GRAPHS = "cuda_graphs: the CPU backend has no CUDA graphs"


def _request():
    coords, cond = make_request([40], 5)
    return coords, cond


def _fallback_records(caplog):
    return [r for r in caplog.records
            if r.name == "sparse3d_engine" and getattr(r, "kind", None) == "fallback"]


def test_a_fallback_is_a_log_record_and_nothing_on_stderr(cache_dir, caplog, capfd):
    caplog.set_level(logging.INFO, logger="sparse3d_engine")
    capfd.readouterr()
    e = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir)
    coords, cond = _request()
    e.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
    records = _fallback_records(caplog)
    assert [r.getMessage() for r in records] == ["fallback: " + GRAPHS]
    r = records[0]
    assert r.levelno == logging.WARNING
    assert (r.optimization, r.reason) == ("cuda_graphs", "the CPU backend has no CUDA graphs")
    # The counter counts it as before.
    assert e.counters()["fallbacks"] == [{"optimization": "cuda_graphs",
                                         "reason": "the CPU backend has no CUDA graphs",
                                         "count": 1}]
    # The engine's start-up line reached the logger at INFO.
    assert any(r.levelno == logging.INFO and "checkpoint read and hashed" in r.getMessage()
               for r in caplog.records if r.name == "sparse3d_engine")
    out, err = capfd.readouterr()
    assert err == "" and out == ""


def test_the_engines_log_callable_gets_its_fallbacks_and_start_up_lines(cache_dir, caplog):
    caplog.set_level(logging.WARNING, logger="sparse3d_engine")
    lines_a, lines_b = [], []
    a = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir, log=lines_a.append)
    b = s3d.Engine(TINY, device="cpu", path="pure_eager", cache_dir=cache_dir,
                   log=lines_b.append)
    assert any("checkpoint read and hashed" in line for line in lines_a)
    coords, cond = _request()
    a.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
    b.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
    assert ("fallback: " + GRAPHS) in lines_a
    assert not any(line.startswith("fallback:") for line in lines_b)
    # In-memory checkpoints route the same way.
    from conftest import read_safetensors
    import json
    with open(TINY) as f:
        config = json.load(f)
    lines_c = []
    c = s3d.Engine.from_state_dict(config, read_safetensors(TINY[:-5] + ".safetensors"),
                                   device="cpu", path="beyond", cache_dir=cache_dir,
                                   log=lines_c.append)
    c.forward(s3d.draw_noise(2, 40, 32), 500.0, cond, coords=coords)
    assert ("fallback: " + GRAPHS) not in lines_c   # a forward captures no graphs
    c.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
    assert ("fallback: " + GRAPHS) in lines_c


def test_fallbacks_from_other_threads_reach_the_logger(cache_dir, caplog, capfd):
    """The sink is called on the request's thread, without the GIL; it takes it."""
    caplog.set_level(logging.WARNING, logger="sparse3d_engine")
    capfd.readouterr()
    engines = [s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir)
               for _ in range(3)]
    coords, cond = _request()
    errors = []

    def work(e):
        try:
            e.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [r.getMessage() for r in _fallback_records(caplog)] == ["fallback: " + GRAPHS] * 3
    assert capfd.readouterr().err == ""


def test_a_log_callable_that_raises_does_not_break_the_request(cache_dir, caplog, monkeypatch):
    """The error cannot go through the engine's C++ frames: Python reports it as an
    unraisable exception (sys.unraisablehook) and the request goes on."""
    reported = []   # what was reported, not the report (its traceback holds frames)
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: reported.append((type(u.exc_value), f"{u.err_msg} {u.object}")))

    def bad(line):
        if line.startswith("fallback:"):
            raise ValueError("a broken log")

    e = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir, log=bad)
    coords, cond = _request()
    want = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir).sample(
        coords, cond, seed=1, sampler=QUICK, progress=False)
    got = e.sample(coords, cond, seed=1, sampler=QUICK, progress=False)
    assert np.array_equal(got, want)
    assert len(reported) == 1 and reported[0][0] is ValueError
    assert "message sink" in reported[0][1]


_SCRIPT = """
import logging, sys
sys.path.insert(0, sys.argv[1])
import sparse3d_engine as s3d
from conftest import TINY, make_request
coords, cond = make_request([40], 5)
e = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=sys.argv[2])
if sys.argv[3] == "off":
    logging.getLogger("sparse3d_engine").setLevel(logging.ERROR)
if sys.argv[3] == "native":
    s3d._native.set_message_sink(None)
e.sample(coords, cond, seed=1, sampler=s3d.SamplerSettings(steps=2), progress=False)
print("done")
"""


def test_without_a_logging_configuration_and_with_the_sink_removed(tmp_path):
    """Python's own last-resort handler prints an unconfigured WARNING (the line C++ printed
    before, now Python's and configurable: "off" raises the logger's level); with
    set_message_sink(None) the C++ default is back and writes the same line itself."""
    for mode, want in (("plain", "fallback: " + GRAPHS + "\n"), ("off", ""),
                       ("native", "fallback: " + GRAPHS + "\n")):
        r = subprocess.run([sys.executable, "-c", _SCRIPT, os.path.dirname(__file__),
                            str(tmp_path), mode], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "done\n"
        assert r.stderr == want, (mode, r.stderr)
