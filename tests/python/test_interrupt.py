"""Ctrl-C during Engine.sample(): a signal that arrives while the loop runs on the main thread
stops the request after the step in progress and raises its KeyboardInterrupt from sample();
the engine serves the next request as if nothing had happened. Signals reach Python's main
thread only, so a request sampled on another thread runs to its end."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY, make_request

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix",
                                reason="POSIX signals")


@pytest.fixture(autouse=True)
def ctrl_c_as_in_a_terminal():
    """SIGINT handled as Python does in a foreground process. A shell starts a background job
    (`cmd &` without job control, as CI scripts may) with SIGINT ignored, Python then leaves it
    ignored, and every signal these tests send would be lost: the test sets Python's own
    handler, and gives its child processes the default disposition, as a terminal would."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def steps_for(engine, coords, cond, seconds):
    """A step count whose request takes about `seconds` here (from a 4-step request)."""
    t0 = time.perf_counter()
    engine.sample(coords, cond, seed=1, sampler=s3d.SamplerSettings(steps=4), progress=False)
    per_step = max((time.perf_counter() - t0) / 4, 1e-4)
    return int(min(10000, max(20, seconds / per_step)))


def interrupt_in(seconds):
    """SIGINT to this process after `seconds`, from a timer thread."""
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer


def test_ctrl_c_stops_a_long_request_within_a_step(engine, tmp_path):
    coords, cond = make_request([301], seed=5)
    steps = steps_for(engine, coords, cond, 20.0)
    settings = s3d.SamplerSettings(steps=steps, guidance_interval=(0.0, 1.0))
    timer = interrupt_in(0.5)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        engine.sample(coords, cond, seed=2, sampler=settings, progress=False)
    elapsed = time.perf_counter() - t0
    timer.cancel()
    # Stopped within 2 s of the signal, of a request that would take about 20 s (at least
    # 20 steps).
    assert elapsed < 2.5, f"sample() returned {elapsed:.2f} s after it began"
    # The engine serves the next request with the bits of an engine never interrupted.
    quick = s3d.SamplerSettings(steps=3)
    got = engine.sample(coords, cond, seed=3, sampler=quick, progress=False)
    fresh = s3d.Engine(TINY, device="cpu", cache_dir=str(tmp_path / "fresh"))
    want = fresh.sample(coords, cond, seed=3, sampler=quick, progress=False)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_ctrl_c_in_the_step_callback_stops_the_request(engine):
    coords, cond = make_request([301], seed=6)
    steps = steps_for(engine, coords, cond, 20.0)
    seen = []

    def callback(index, t, latent):
        seen.append(index)
        if index == 2:
            raise KeyboardInterrupt

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        engine.sample(coords, cond, seed=2, sampler=s3d.SamplerSettings(steps=steps),
                      callback=callback, progress=False)
    elapsed = time.perf_counter() - t0
    assert seen == [0, 1, 2]
    # The callbacks end at the first error; the request must end there too (about 20 s
    # otherwise).
    assert elapsed < 2.5, f"the request ran on for {elapsed:.2f} s after the interrupt"


def test_another_error_in_the_step_callback_still_lets_the_request_finish(engine):
    # The documented rule for callback errors other than an interrupt: the callbacks end, the
    # request runs to its end, and sample() raises the error.
    coords, cond = make_request([64], seed=7)
    seen = []

    def callback(index, t, latent):
        seen.append(index)
        if index == 1:
            raise ValueError("from the callback")

    with pytest.raises(ValueError, match="from the callback"):
        engine.sample(coords, cond, seed=2, sampler=s3d.SamplerSettings(steps=5),
                      callback=callback, progress=False)
    assert seen == [0, 1]


def test_a_request_on_another_thread_is_not_stopped_by_the_main_threads_signal(engine):
    coords, cond = make_request([64], seed=8)
    settings = s3d.SamplerSettings(steps=steps_for(engine, coords, cond, 1.5))
    result, failure = [], []

    def run():
        try:
            result.append(engine.sample(coords, cond, seed=2, sampler=settings, progress=False))
        except BaseException as e:  # noqa: BLE001
            failure.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.3)
    with pytest.raises(KeyboardInterrupt):
        # The main thread takes the signal (here, in its sleep); the worker's request goes on.
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    worker.join(120)
    assert not worker.is_alive()
    assert not failure, failure
    want = engine.sample(coords, cond, seed=2, sampler=settings, progress=False)
    np.testing.assert_array_equal(np.asarray(result[0]), np.asarray(want))


def test_ctrl_c_ends_python_m_run_by_the_signal_leaving_no_file(tmp_path):
    import sparse3d_engine
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE3D_CLI",)}
    package = os.path.abspath(sparse3d_engine.__file__)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(package))
    env["SPARSE3D_ENGINE_PROGRESS"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "sparse3d_engine", "run",
                          "--checkpoint", os.path.abspath(TINY), "--tokens", "301",
                          "--steps", "10000", "--device", "cpu", "--no-qualification-cache",
                          "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=tmp_path, preexec_fn=default_sigint)
    # The signal once the request runs: after the line naming its sampler (printed before the
    # loop starts), and a moment of steps.
    for line in p.stdout:
        if "sampler:" in line:
            break
    else:
        pytest.fail(f"the run ended before its request: {p.communicate()}")
    time.sleep(0.5)
    assert p.poll() is None, p.communicate()
    t0 = time.perf_counter()
    p.send_signal(signal.SIGINT)
    try:
        stdout, stderr = p.communicate(timeout=60)
    finally:  # a child that did not stop must not run on after the test
        if p.poll() is None:
            p.kill()
            p.communicate()
    elapsed = time.perf_counter() - t0
    # The `sparse3d` command line itself: ended by the signal, without a word.
    assert p.returncode == -signal.SIGINT, (p.returncode, stderr)
    assert elapsed < 2.0, f"exited {elapsed:.2f} s after the signal"
    assert stderr == "", stderr
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())


def test_ctrl_c_stops_a_gpu_request_within_two_steps_and_costs_no_speed(cache_dir):
    try:
        gpu = s3d.Engine(TINY, device="cuda", cache_dir=cache_dir)
    except s3d.Error as e:
        pytest.skip(f"needs a CUDA device ({e})")
    coords, cond = make_request([3001], seed=9)
    settings = s3d.SamplerSettings(steps=400, guidance_interval=(0.0, 1.0))
    gpu.sample(coords, cond, seed=1, sampler=s3d.SamplerSettings(steps=3), progress=False)

    # The same request's loop, on this (main) thread, where it can be stopped and the host
    # waits for the step before the last, and on another thread, where it cannot: the fence
    # must not slow the device down.
    def loop_seconds():
        gpu.sample(coords, cond, seed=2, sampler=settings, progress=False)
        return gpu.last_request["stats"]["loop_seconds"]

    main = min(loop_seconds() for _ in range(3))
    other = []
    for _ in range(3):
        worker = threading.Thread(target=lambda: other.append(loop_seconds()))
        worker.start()
        worker.join()
    other = min(other)
    per_step = other / settings.steps
    print(f"loop {main:.4f} s stoppable, {other:.4f} s not; {1e3 * per_step:.3f} ms a step")
    assert main < 1.05 * other + 0.002, (main, other)

    # Stopped within two steps (and the launch and signal latencies) of the signal.
    long = s3d.SamplerSettings(steps=10000, guidance_interval=(0.0, 1.0))
    assert 10000 * per_step > 1.0  # the request outlasts the signal
    timer = interrupt_in(0.5)
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            gpu.sample(coords, cond, seed=3, sampler=long, progress=False)
        late = time.perf_counter() - t0 - 0.5
    finally:
        timer.cancel()
    print(f"returned {1e3 * late:.1f} ms after the signal ({late / per_step:.1f} steps)")
    assert late < 3 * per_step + 0.05, (late, per_step)
