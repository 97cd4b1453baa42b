"""Calling an engine from inside its own request: a step callback (`callback=`) and the
engine's `log` (start-up lines, null-context lines, its fallback lines) run while the
request holds the engine's lock. Read-only calls made there answer; a request, warm-up,
offload, reload or reset_counters raises s3d.Error at once, naming the call, instead of
waiting forever for the lock. Each request runs on a helper thread joined with a time-out,
so that a deadlock fails the test instead of hanging the suite."""
import sys
import threading

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY, make_request

QUICK = s3d.SamplerSettings(steps=2, guidance_interval=(0.0, 1.0))
INSIDE = ("called from inside a callback (a step callback or the log) of a request running "
          "on the same engine")
MUTATING = ("sample", "forward", "warm_up", "offload", "reload", "reset_counters")


def within_a_minute(fn):
    """fn() on a daemon thread, joined for at most 60 s (a request here takes well under a
    second); its exception is raised here. A thread still running is a deadlock."""
    result, failure = [], []

    def run():
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            failure.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        pytest.fail("a call of the engine from inside its own request deadlocked "
                    "(still running after 60 s)")
    if failure:
        raise failure[0]
    return result[0]


def _mutating_calls(engine, coords, cond):
    """{call: the s3d.Error message it raised, or None} for each mutating call."""
    noise = s3d.draw_noise(3, coords.shape[0], 32)
    calls = {
        "sample": lambda: engine.sample(coords, cond, seed=1, sampler=QUICK, progress=False),
        "forward": lambda: engine.forward(noise, 500.0, cond, coords=coords),
        "warm_up": lambda: engine.warm_up([coords.shape[0]], cond.shape[1]),
        "offload": engine.offload,
        "reload": engine.reload,
        "reset_counters": engine.reset_counters,
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = None
        except s3d.Error as e:
            out[name] = str(e)
    return out


def _expect_refused(messages):
    assert sorted(messages) == sorted(MUTATING)
    for name, message in messages.items():
        assert message is not None, f"{name}() ran from inside the request"
        assert message.startswith(f"{name}() {INSIDE}"), message


def test_a_step_callback_reads_its_engine(engine):
    coords, cond = make_request([40], 1)
    seen = []

    def callback(step, t, latent):
        seen.append({"requests": engine.counters()["requests"],
                     "fits": engine.fits(40, 1, 9),
                     "qualification": engine.qualification(),
                     "fingerprint": engine.fingerprint(),
                     "resident": engine.residency()["resident"] and engine.resident,
                     "model": engine.model["out_channels"],
                     "plan": engine.plan, "device": engine.device,
                     "latent": latent.shape})

    within_a_minute(lambda: engine.sample(coords, cond, seed=1, sampler=QUICK,
                                          callback=callback, progress=False))
    assert len(seen) == 2
    for s in seen:
        # The request in flight is counted when it returns.
        assert s["requests"] == 0 and s["fits"] == ""
        assert [q["context_tokens"] for q in s["qualification"]] == [9]
        assert s["fingerprint"] == engine.fingerprint()
        assert s["resident"] is True and s["model"] == 32
        assert (s["plan"], s["device"], s["latent"]) == (engine.plan, "cpu", (40, 32))
    assert engine.counters()["requests"] == 1


def test_a_step_callback_cannot_start_work_on_its_engine(engine):
    coords, cond = make_request([40], 2)
    refused = []

    def callback(step, t, latent):
        if step == 0:
            refused.append(_mutating_calls(engine, coords, cond))

    want = engine.sample(coords, cond, seed=4, sampler=QUICK, progress=False)
    got = within_a_minute(lambda: engine.sample(coords, cond, seed=4, sampler=QUICK,
                                                callback=callback, progress=False))
    _expect_refused(refused[0])
    # The refused calls changed nothing: the same latent, the engine still resident.
    np.testing.assert_array_equal(got, want)
    assert engine.counters()["requests"] == 2 and engine.resident
    assert engine.residency()["offloads"] == 0


def test_an_uncaught_refusal_in_a_callback_is_raised_by_sample(engine):
    coords, cond = make_request([40], 3)

    def callback(step, t, latent):
        engine.sample(coords, cond, seed=1, sampler=QUICK, progress=False)

    with pytest.raises(s3d.Error, match=r"^sample\(\) called from inside a callback"):
        within_a_minute(lambda: engine.sample(coords, cond, seed=1, sampler=QUICK,
                                              callback=callback, progress=False))
    # The engine serves the next request.
    out = within_a_minute(lambda: engine.sample(coords, cond, seed=1, sampler=QUICK,
                                                progress=False))
    assert np.isfinite(out).all()


def test_the_log_reads_its_engine_and_cannot_start_work(cache_dir):
    """The log gets start-up lines (the null-context probe and qualification, which a request
    sends while it holds the lock), the engine's fallback lines (path beyond on the CPU
    backend: no CUDA graphs) and offload's line: from each it may read the engine, and each
    mutating call raises."""
    coords, cond = make_request([40], 4)
    holder, lines, reads, refused = [], [], [], []

    def log(line):
        lines.append(line)
        if not holder:
            return   # the constructor's lines: there is no engine object yet
        e = holder[0]
        reads.append((e.counters()["requests"], e.fits(40, 1, 9), len(e.qualification()),
                      bool(e.fingerprint()), e.residency()["weight_bytes"] > 0))
        refused.append(_mutating_calls(e, coords, cond))

    e = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir, log=log)
    holder.append(e)
    start = len(lines)
    within_a_minute(lambda: e.sample(coords, cond, seed=1, sampler=QUICK, progress=False))
    request_lines = lines[start:]
    assert any(line.startswith("null context") for line in request_lines), request_lines
    assert "fallback: cuda_graphs: the CPU backend has no CUDA graphs" in request_lines
    assert len(refused) == len(request_lines) == len(reads)
    for r in refused:
        _expect_refused(r)
    assert all(r[0] == 0 and r[1] == "" and r[3] and r[4] for r in reads)
    within_a_minute(e.offload)
    assert lines[-1].startswith("weights offloaded")
    _expect_refused(refused[-1])
    assert e.residency()["offloads"] == 1 and not e.resident
    holder.clear()


def test_a_log_whose_engine_call_raises_does_not_break_the_request(cache_dir, monkeypatch):
    """An s3d.Error the log does not catch cannot go through the engine's frames: it is
    reported as unraisable, for start-up lines as for fallback lines, and the request goes
    on to the same latent."""
    reported = []
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: reported.append((type(u.exc_value), str(u.exc_value))))
    coords, cond = make_request([40], 5)
    holder = []

    def log(line):
        if holder:
            holder[0].reset_counters()

    e = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir, log=log)
    holder.append(e)
    want = s3d.Engine(TINY, device="cpu", path="beyond", cache_dir=cache_dir).sample(
        coords, cond, seed=1, sampler=QUICK, progress=False)
    got = within_a_minute(lambda: e.sample(coords, cond, seed=1, sampler=QUICK,
                                           progress=False))
    np.testing.assert_array_equal(got, want)
    assert reported and all(kind is s3d.Error and message.startswith(f"reset_counters() {INSIDE}")
                            for kind, message in reported)
    holder.clear()


def test_another_threads_call_waits_for_the_request(engine):
    """One request at a time: a call from another thread during a callback waits until the
    request returns (it is neither refused nor run beside it)."""
    coords, cond = make_request([40], 6)
    answers, waited = [], []

    def callback(step, t, latent):
        if step == 0:
            other = threading.Thread(target=lambda: answers.append(engine.counters()["requests"]),
                                     daemon=True)
            other.start()
            other.join(0.3)
            waited.append(other.is_alive())
            callback.other = other

    within_a_minute(lambda: engine.sample(coords, cond, seed=1, sampler=QUICK,
                                          callback=callback, progress=False))
    callback.other.join(60)
    assert waited == [True] and answers == [1]
