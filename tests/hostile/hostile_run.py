#!/usr/bin/env python3
"""Hostile-input run: the engine tried as an attacker and an unlucky operator would, on the
CPU backend, every case in a subprocess of its own, in a temporary folder of its own, and
every outcome classified mechanically against the case's declared expectation.

  python3 tests/hostile/hostile_run.py --build build --label before [--jobs 2] [--filter SUBSTR]
                               [--timeout 20] [--out bench/results/hostile-inputs/DATE-LABEL]
                               [--program sparse3d|python]
  python3 tests/hostile/hostile_run.py --compare A.json B.json

--program python runs every command-line case through `python -m sparse3d_engine` (the
package's entry point, which runs the same C++ command line through the native module)
instead of the `sparse3d` executable; its error lines start "sparse3d-engine: error: ", and a
refusal is slow only past 1 s beyond the interpreter's measured start-up.

Writes OUT.json (every case: name, family, expectation, outcome, flags, exit code, first
line of stderr, seconds, peak RSS) and OUT.md (cases per class per family, then every case
whose outcome is not correct, with its message), and prints the summary table last.

Outcome classes:
  refused           an invalid input refused cleanly: exit 1 or 2 with one
                    "sparse3d: error: ..." line (the CLI), or a sparse3d_engine.Error /
                    TypeError / ValueError (the Python package)
  accepted          a valid input that ran (exit 0)
  wrongly_accepted  an invalid input that ran and exited 0, or a value silently changed
  wrongly_refused   a valid input refused
  hang              no exit within the per-case timeout (the process group is killed)
  partial_files     a failed or interrupted command left new files or folders behind
                    (hidden .NAME.XXXXXX temporaries included)
  off_format_error  failed, but not with the standard one line: exit 3 "internal error", a
                    stack trace, std::bad_alloc, an AttributeError, a multi-line dump
  crash             killed by a signal the harness did not send, or a sanitizer report
  bad_mode          a valid run whose new files are not 0644 (folders 0755) under umask 022
Flags added to any class: slow_refusal (refused after more than 1 s), large_allocation
(peak RSS over 1 GiB), vague_message (a Python refusal whose message names none of the
words the case expects it to name).

Only files under /tmp (and the --out files) are written. Stdlib and NumPy only.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIB = 1 << 30

CORRECT = {"refused", "accepted"}
CLASSES = ["refused", "accepted", "wrongly_accepted", "wrongly_refused", "hang",
           "partial_files", "off_format_error", "crash", "bad_mode"]
TEMP_RE = re.compile(r"^\..+\.[A-Za-z0-9]{6}$")


# ---- Small file writers (safetensors, JSON) --------------------------------------------------

def st_bytes(tensors, metadata=None, header_override=None, pad_header=True):
    """A safetensors file: tensors is [(name, dtype, shape, raw bytes)]."""
    header, off, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header if header_override is None else header_override).encode()
    if pad_header:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return header, data, n


def st_from_arrays(arrays):
    out = []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        dt = {"float32": "F32", "int32": "I32", "int64": "I64", "float16": "F16",
              "float64": "F64", "uint8": "U8", "uint16": "U16"}[str(a.dtype)]
        out.append((name, dt, a.shape, a.tobytes()))
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


# ---- The qualification cache's key and checksum (src/core/hash.cpp, qualification_cache.cpp) --

M64 = (1 << 64) - 1


def _splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _mix(lane, word):
    return (((lane ^ _splitmix64(word)) * 0x9E3779B97F4A7C15) + 0x632BE59BD9B4E019) & M64


def content_hash(data, seed=0):
    lanes = [_splitmix64((seed + k) & M64) for k in range(4)]
    n, i = len(data), 0
    while i + 32 <= n:
        for k in range(4):
            lanes[k] = _mix(lanes[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
        i += 32
    tail = data[i:] + b"\0" * (32 - (n - i))
    for k in range(4):
        lanes[k] = _mix(lanes[k], int.from_bytes(tail[8 * k:8 * k + 8], "little"))
    h = _splitmix64(n)
    for k in range(4):
        h = _splitmix64(h ^ lanes[k])
    return h


def json_dump_compact(v):
    # nlohmann's dump(): compact, keys in byte order, UTF-8 unescaped.
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def cache_checksum(entry):
    e = {k: v for k, v in entry.items() if k != "checksum"}
    return "%016x" % content_hash(json_dump_compact(e).encode())


def cache_key(entry):
    k = {"fingerprint": entry["fingerprint"], "weights": entry["weights"], "shapes": entry["shapes"]}
    return "%016x" % content_hash(json_dump_compact(k).encode())


# ---- Cases ------------------------------------------------------------------------------------

class Case:
    """One input. kind 'cli' (argv after the binary) or 'py' (a snippet run by the Python
    prelude). expect: 'valid', 'invalid', 'any' (either outcome is correct) or 'interrupt'
    (a signal is sent: a clean end leaves no new file)."""

    def __init__(self, family, name, expect, kind, argv=None, code=None, setup=None, env=None,
                 signal_spec=None, fsize=None, names=None, check_modes=False, stdin=None,
                 wrap=None):
        self.family, self.name, self.expect, self.kind = family, name, expect, kind
        # env: a value None removes the variable; wrap: a command put before the case's own
        # (setpriv, unshare), its @CWD / @HOME replaced as the argv's are.
        self.argv, self.code, self.setup, self.env = argv, code, setup, env or {}
        self.wrap = wrap or []
        self.signal_spec, self.fsize, self.names = signal_spec, fsize, names
        self.check_modes = check_modes


class Ctx:
    """Paths of the shared fixtures (made once, read-only for the cases)."""

    def __init__(self, build, root, program="sparse3d"):
        self.build, self.root = os.path.abspath(build), root
        self.cli = os.path.join(self.build, "bin", "sparse3d")
        self.program = program
        # The command a 'cli' case runs, and the seconds it takes to start (python: measured).
        self.command = [self.cli] if program == "sparse3d" else [sys.executable, "-m", "sparse3d_engine"]
        self.startup_s = 0.0
        self.pypath = os.path.join(self.build, "python")
        self.fx = os.path.join(root, "fixtures")


PY_PRELUDE = r'''
import os, sys, json, threading, traceback
import numpy as np
FX = os.environ["HOSTILE_FX"]
TINY = os.path.join(FX, "ck", "tiny.json")
TINY_SS = os.path.join(FX, "ck", "tinyss.json")
CACHE = os.environ["HOSTILE_CACHE"]
class Wrong(Exception):
    """A valid-looking success that changed a value or skipped a check."""
def req(counts=(20,), seed=1, L=9, C=64, res=64):
    rng = np.random.default_rng(seed)
    rows = []
    for b, n in enumerate(counts):
        flat = np.sort(rng.choice(res ** 3, size=n, replace=False))
        xyz = np.stack(np.unravel_index(flat, (res, res, res)), axis=1)
        rows.append(np.concatenate([np.full((n, 1), b), xyz], axis=1))
    coords = np.ascontiguousarray(np.concatenate(rows).astype(np.int32))
    cond = rng.standard_normal((len(counts), L, C)).astype(np.float32)
    return coords, cond
def noise_for(coords, C=32, seed=2):
    return np.random.default_rng(seed).standard_normal((coords.shape[0], C)).astype(np.float32)
def main():
    import sparse3d_engine as s3d
    def eng(ckpt=None, **kw):
        kw.setdefault("device", "cpu")
        kw.setdefault("cache_dir", CACHE)
        return s3d.Engine(TINY if ckpt is None else ckpt, **kw)
    g = dict(globals()); g.update(s3d=s3d, eng=eng)
    import time as _t
    t0 = _t.monotonic()
    try:
        exec(compile(BODY, "<case>", "exec"), g)
    except Wrong as e:
        sys.stderr.write("HOSTILE-T %.3f\n" % (_t.monotonic() - t0))
        sys.stderr.write("HOSTILE-WRONG %s\n" % str(e).replace("\n", " | "))
        sys.exit(5)
    except (s3d.Error, TypeError, ValueError) as e:
        sys.stderr.write("HOSTILE-T %.3f\n" % (_t.monotonic() - t0))
        msg = str(e)
        sys.stderr.write("HOSTILE-REFUSED %s: %s\n" % (type(e).__name__, msg.replace("\n", " | ")))
        sys.exit(4 if ("\n" in msg.strip() or not msg.strip()) else 1)
    except BaseException as e:
        sys.stderr.write("HOSTILE-T %.3f\n" % (_t.monotonic() - t0))
        sys.stderr.write("HOSTILE-OTHER %s: %s\n" % (type(e).__name__, str(e).replace("\n", " | ")))
        traceback.print_exc()
        sys.exit(3)
    sys.stdout.write("HOSTILE-OK\n")
    sys.stdout.flush()
main()
'''


def snapshot(top):
    out = {}
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, top)] = (st.st_mode, st.st_size)
    return out


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


INFO_PREFIXES = ("fallback", "warning:", "qualification cache", "sparse3d: note")
TRACE_MARKERS = ("internal error", "terminate called", "Traceback", "AddressSanitizer",
                 "runtime error:", "Segmentation", "core dumped", "std::bad_alloc", "bad_cast",
                 "what():", "Aborted", "LeakSanitizer", "UndefinedBehaviorSanitizer")


def cli_error_format(stderr):
    """'' when stderr is the standard one-line error, else why not. The package's entry point
    names itself sparse3d-engine; its lines are read as the executable's."""
    lines = [("sparse3d: error: " + l[len("sparse3d-engine: error: "):])
             if l.startswith("sparse3d-engine: error: ") else l
             for l in stderr.splitlines() if l.strip()]
    errs = [l for l in lines if l.startswith("sparse3d: error: ")]
    for m in TRACE_MARKERS:
        if m in stderr:
            return "stderr holds '%s'" % m
    if len(errs) != 1:
        return "%d 'sparse3d: error:' lines" % len(errs)
    if lines[-1] != errs[0]:
        return "the error line is not the last line"
    other = [l for l in lines if l is not errs[0] and not l.startswith(INFO_PREFIXES)]
    if other:
        return "%d other stderr lines" % len(other)
    return ""


def run_case(ctx, case, idx, timeout):
    base = os.path.join(ctx.root, "cases", "%04d" % idx)
    cwd, home, logs = os.path.join(base, "cwd"), os.path.join(base, "home"), os.path.join(base, "logs")
    for d in (cwd, home, logs):
        os.makedirs(d, exist_ok=True)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SPARSE3D_"):
            del env[k]
    cache = os.path.join(home, "cache")
    env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, "xdg"), SPARSE3D_CACHE_DIR=cache,
               HOSTILE_FX=ctx.fx, HOSTILE_CACHE=cache, HOSTILE_CWD=cwd,
               PYTHONPATH=ctx.pypath, SPARSE3D_ENGINE_PROGRESS="0", OMP_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.update(case.env)
    for k in [k for k, v in env.items() if v is None]:
        del env[k]
    for k, v in case.env.items():
        if isinstance(v, str):
            env[k] = v.replace("@CWD", cwd).replace("@HOME", home)
    setup_error = None
    if case.setup is not None:
        try:
            case.setup(ctx, cwd, home)
        except Exception as e:  # a harness bug: reported, not hidden
            setup_error = "setup failed: %r" % (e,)
    if case.kind == "cli":
        argv = ctx.command + [a.replace("@CWD", cwd).replace("@FX", ctx.fx) for a in case.argv]
    else:
        body = case.code.replace("@CWD", cwd).replace("@FX", ctx.fx)
        argv = [sys.executable, "-c", "BODY = %r\n" % body + PY_PRELUDE]
    if case.fsize is not None:
        argv = ["prlimit", "--fsize=%d" % case.fsize, "--"] + argv
    argv = [a.replace("@CWD", cwd).replace("@HOME", home) for a in case.wrap] + argv
    before = snapshot(cwd)
    t0 = time.monotonic()
    sent = None
    hung = False
    rusage = None
    try:
        # Pipes, not files: RLIMIT_FSIZE must not hit the logs.
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, start_new_session=True, umask=0o022)
    except OSError as e:
        return dict(name=case.name, family=case.family, expectation=case.expect,
                    outcome="crash", flags=[], exit_code=None, stderr="cannot start: %s" % e,
                    detail="", seconds=0.0, rss_mib=0.0, signal_sent=None)
    bufs = {"out": bytearray(), "err": bytearray()}

    def drain(stream, key):
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            if len(bufs[key]) < (4 << 20):
                bufs[key] += chunk
    readers = [threading.Thread(target=drain, args=(p.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(p.stderr, "err"), daemon=True)]
    for t in readers:
        t.start()
    status = None
    sig_at = None
    if case.signal_spec:
        sig, trigger = case.signal_spec
        sig_at = ("delay", trigger) if isinstance(trigger, (int, float)) else ("temp", 10.0)
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            status, rusage = st, ru
            break
        el = time.monotonic() - t0
        if sent is None and sig_at is not None:
            fire = False
            if sig_at[0] == "delay":
                fire = el >= sig_at[1]
            else:
                fire = el >= sig_at[1] or any(TEMP_RE.match(os.path.basename(k))
                                              for k in snapshot(cwd))
            if fire:
                try:
                    os.kill(p.pid, case.signal_spec[0])
                    sent = case.signal_spec[0]
                except ProcessLookupError:
                    pass
        if el > timeout:
            hung = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, rusage = os.wait4(p.pid, 0)
            break
        time.sleep(0.005 if el < 1 else 0.02)
    p.returncode = 0  # reaped by wait4
    seconds = time.monotonic() - t0
    # Whatever is left of the group (a grandchild) goes too.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for t in readers:
        t.join(timeout=5)
    rss_mib = rusage.ru_maxrss / 1024.0 if rusage else 0.0
    stdout = bytes(bufs["out"]).decode("utf-8", "replace")
    stderr = bytes(bufs["err"]).decode("utf-8", "replace")
    write(os.path.join(logs, "stdout"), stdout)
    write(os.path.join(logs, "stderr"), stderr)
    after = snapshot(cwd)
    new = sorted(k for k in after if k not in before)
    temps = [k for k in new if TEMP_RE.match(os.path.basename(k))]
    if os.WIFSIGNALED(status):
        rc, signum = None, os.WTERMSIG(status)
    else:
        rc, signum = os.WEXITSTATUS(status), None
    expected_signal = case.signal_spec[0] if case.signal_spec else (
        signal.SIGXFSZ if case.fsize is not None else None)
    flags = []
    detail = ""
    msg = first_line(stderr)
    inner = None   # a Python case: the seconds of the case's own code, after the imports
    if case.kind == "py":
        for line in stderr.splitlines():
            if line.startswith("HOSTILE-T "):
                inner = float(line.split()[1])
            elif line.startswith("HOSTILE-"):
                msg = line[:300]
                break
    failed = True
    if setup_error:
        outcome, msg = "crash", setup_error
    elif hung:
        outcome = "hang"
        detail = "killed after %.0f s" % timeout
    elif signum is not None and signum != expected_signal and not (sent and signum == sent):
        outcome = "crash"
        detail = "killed by %s" % signal.Signals(signum).name
    elif any(m in stderr for m in ("AddressSanitizer", "UndefinedBehaviorSanitizer",
                                   "LeakSanitizer", "runtime error:")):
        outcome = "crash"
        detail = "sanitizer report"
    elif signum is not None:
        outcome = "interrupted"
        detail = "ended by %s" % signal.Signals(signum).name
    elif rc == 0:
        failed = False
        outcome = "accepted" if case.expect in ("valid", "any", "interrupt") else "wrongly_accepted"
        if case.kind == "py" and "HOSTILE-OK" not in stdout:
            outcome, detail = "off_format_error", "exit 0 without the harness's OK line"
    elif case.kind == "cli":
        why = cli_error_format(stderr)
        if rc in (1, 2) and not why:
            outcome = "refused"
        else:
            outcome = "off_format_error"
            detail = "exit %s%s" % (rc, "; " + why if why else "")
    else:
        if rc == 1:
            outcome = "refused"
        elif rc == 5:
            outcome, failed = "wrongly_accepted", False
        elif rc == 4:
            outcome, detail = "off_format_error", "a multi-line or empty message"
        else:
            outcome, detail = "off_format_error", "exit %s" % rc
    if outcome in ("refused", "interrupted") and case.expect == "valid":
        outcome = "wrongly_refused"
    if outcome == "interrupted":
        outcome = "refused"
    if failed and outcome not in ("hang", "crash") and new:
        outcome = "partial_files"
        detail = ("left %s" % ", ".join(new[:6])) + (" (+%d)" % (len(new) - 6) if len(new) > 6 else "")
    if not failed and temps:
        outcome = "partial_files"
        detail = "temporaries left after success: %s" % ", ".join(temps[:4])
    if not failed and outcome == "accepted" and case.check_modes:
        bad = []
        for k in new:
            mode = after[k][0]
            perm = mode & 0o777
            if (os.path.isfile(os.path.join(cwd, k)) and perm != 0o644) or \
               (os.path.isdir(os.path.join(cwd, k)) and perm != 0o755):
                bad.append("%s %o" % (k, perm))
        if case.kind == "py" or True:
            cache_files = snapshot(os.path.join(home, "cache")) if os.path.isdir(os.path.join(home, "cache")) else {}
            for k, (mode, _) in cache_files.items():
                if os.path.isfile(os.path.join(home, "cache", k)) and mode & 0o777 != 0o644:
                    bad.append("cache/%s %o" % (k, mode & 0o777))
        if bad:
            outcome = "bad_mode"
            detail = "; ".join(bad[:4])
        elif not new and not os.path.isdir(os.path.join(home, "cache")):
            detail = "no new file to check"
    # (An interrupted or fault-injected command did work before it failed: not a slow refusal.)
    own = seconds - (ctx.startup_s if case.kind == "cli" else 0.0)
    if outcome == "refused" and case.family != "signals" and (own if inner is None else inner) > 1.0:
        flags.append("slow_refusal")
    if rss_mib * 1024 * 1024 > GIB:
        flags.append("large_allocation")
    if outcome == "refused" and case.kind == "py" and case.names:
        low = msg.lower()
        if not any(n.replace("@FX", ctx.fx).lower() in low for n in case.names):
            flags.append("vague_message")
    return dict(name=case.name, family=case.family, expectation=case.expect, outcome=outcome,
                flags=flags, exit_code=rc if signum is None else -signum,
                stderr=msg, detail=detail, seconds=round(seconds, 3), rss_mib=round(rss_mib, 1),
                signal_sent=signal.Signals(sent).name if sent else None)


# ---- Fixtures ---------------------------------------------------------------------------------

def _seconds(argv, env):
    t0 = time.monotonic()
    run_quiet(argv, env=env)
    return time.monotonic() - t0


def run_quiet(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit("fixture command failed: %s\n%s%s" % (" ".join(argv), r.stdout, r.stderr))
    return r


def make_fixtures(ctx):
    fx = ctx.fx
    os.makedirs(fx, exist_ok=True)
    run_quiet([ctx.cli, "make-checkpoint", "--preset", "tiny", "--out", os.path.join(fx, "ck", "tiny")])
    run_quiet([ctx.cli, "make-checkpoint", "--preset", "tiny-ss", "--out", os.path.join(fx, "ck", "tinyss")])
    run_quiet([ctx.cli, "make-payloads", "--set", "small", "--out", os.path.join(fx, "pay")])
    # A payload of tiny assets for quick runs: the committed golden inputs.
    gold = os.path.join(REPO, "tests", "data", "golden", "inputs")
    shutil.copytree(gold, os.path.join(fx, "gold"))
    # One --inputs request for the tiny checkpoint (cond 64 channels, out 32).
    rng = np.random.default_rng(5)
    flat = np.sort(rng.choice(64 ** 3, size=40, replace=False))
    xyz = np.stack(np.unravel_index(flat, (64, 64, 64)), axis=1)
    coords = np.concatenate([np.zeros((40, 1)), xyz], axis=1).astype(np.int32)
    cond = rng.standard_normal((9, 64)).astype(np.float32)
    write(os.path.join(fx, "inputs", "req.safetensors"),
          st_bytes(st_from_arrays({"coords": coords, "cond": cond})))
    # A qualification cache as the engine writes it (one probe entry).
    env = dict(os.environ, PYTHONPATH=ctx.pypath, SPARSE3D_ENGINE_PROGRESS="0")
    code = ("import sparse3d_engine as s3d, numpy as np, sys\n"
            "e = s3d.Engine(sys.argv[1], device='cpu', cache_dir=sys.argv[2])\n"
            "rng = np.random.default_rng(1)\n"
            "c = np.array([[0, 1, 2, 3], [0, 4, 5, 6]], np.int32)\n"
            "e.sample(c, rng.standard_normal((1, 9, 64)).astype(np.float32), seed=1, "
            "sampler={'steps': 2})\n"
            "print(e.counters())\n")
    r = subprocess.run([sys.executable, "-c", code, os.path.join(fx, "ck", "tiny.json"),
                        os.path.join(fx, "cache")], env=env, capture_output=True, text=True)
    ctx.counters_sample = r.stdout.strip()
    if r.returncode != 0:
        print("warning: the Python package does not run (%s): no cache fixture" %
              first_line(r.stderr[-400:]), flush=True)
    qpath = os.path.join(fx, "cache", "qualification.json")
    ctx.cache_ok = False
    if os.path.exists(qpath):
        doc = json.load(open(qpath))
        ents = doc.get("entries", {})
        ctx.cache_ok = bool(ents) and all(
            cache_key(e) == k and cache_checksum(e) == e.get("checksum") for k, e in ents.items())
    # A bench result JSON (bench-report's input): a committed one.
    res = sorted(f for f in os.listdir(os.path.join(REPO, "bench", "results"))
                 if f.endswith(".json") and "h200-fast.json" in f)
    ctx.bench_json = os.path.join(fx, "bench.json")
    if res:
        shutil.copy(os.path.join(REPO, "bench", "results", res[0]), ctx.bench_json)


# ---- Case families ----------------------------------------------------------------------------

VALUES = [("-1", "-1"), ("0", "0"), ("2.7", "2.7"), ("1e23", "1e23"),
          ("2^64", str(1 << 64)), ("2^63", str(1 << 63)), ("empty", ""), ("nan", "nan"),
          ("inf", "inf"), ("2e9", "2000000000")]


def expect_for(kind, label):
    """The expectation of a numeric value by the option's type."""
    big = label in ("2^64", "2^63", "2e9", "1e23")
    table = {
        "u64": {"0": "valid", "2^63": "valid", "2e9": "valid"},
        "steps": {},
        "posf": {"2.7": "valid", "1e23": "valid", "2e9": "valid", "2^64": "valid", "2^63": "valid"},
        "finf": {"0": "valid", "2.7": "valid"},   # a negative guidance is no guidance at all
        "unit": {"0": "valid"},
        "gib": {"0": "valid", "2.7": "valid", "1e23": "any", "2e9": "any", "2^64": "any", "2^63": "any"},
        "m": {"2e9": "any"},
        "pos_int_small": {},
        "nonneg_int_small": {"0": "valid"},
        "count": {"0": "valid"},
        "unit_t": {"0": "any"},
    }[kind]
    if kind == "finf" and big:
        return "any"   # finite and legal, but the latent may overflow: either outcome
    return table.get(label, "invalid")


def cli_cases(ctx):
    cases = []
    CK = os.path.join(ctx.fx, "ck", "tiny.json")
    GOLD = os.path.join(ctx.fx, "gold", "manifest.json")
    INP = os.path.join(ctx.fx, "inputs", "req.safetensors")
    MC = ["make-checkpoint", "--preset", "tiny", "--out", "ck/t"]
    MP = ["make-payloads", "--set", "small", "--tokens", "7,9", "--out", "pay"]
    RUN = ["run", "--checkpoint", CK, "--manifest", GOLD, "--asset", "a01-torus-61", "--device",
           "cpu", "--steps", "2", "--out", "out"]
    RUNI = ["run", "--checkpoint", CK, "--inputs", INP, "--device", "cpu", "--steps", "2",
            "--out", "out"]
    BENCH = ["bench", "--device", "cpu", "--checkpoint", CK, "--manifest", GOLD, "--assets",
             "a01-torus-61", "--no-torch", "--protocol", "repeated", "--repeats", "1", "--warmup",
             "0", "--steps", "2", "--paths", "pure_eager", "--out", "out"]
    PROF = ["profile", "--checkpoint", CK, "--manifest", GOLD]
    RUNT = ["run", "--checkpoint", CK, "--tokens", "20", "--cond-tokens", "5", "--device", "cpu",
            "--steps", "1", "--out", "out"]

    def with_opt(base, opt, vals):
        argv = list(base)
        if opt in argv:
            i = argv.index(opt)
            n = 2 if opt == "--interval" else 1
            argv[i + 1:i + 1 + n] = vals
        else:
            argv += [opt] + vals
        return argv

    numeric = [
        ("make-checkpoint", MC, "--seed", "u64"),
        ("make-payloads", MP, "--seed", "u64"),
        ("make-payloads", MP, "--cond-tokens", "pos_int_small"),
        ("make-payloads", MP, "--cond-channels", "pos_int_small"),
        ("make-payloads", MP, "--concat-channels", "nonneg_int_small"),
        ("make-payloads", MP, "--tokens", "pos_int_small"),
        ("run", RUNI, "--seed", "u64"),
        ("run", RUNT, "--seed", "u64"),
        ("run", RUNT, "--tokens", "pos_int_small"),
        ("run", RUNT, "--cond-tokens", "pos_int_small"),
        ("run", RUN, "--steps", "steps"),
        ("run", RUN, "--rescale-t", "posf"),
        ("run", RUN, "--cfg", "finf"),
        ("run", RUN, "--guidance-rescale", "unit"),
        ("run", RUN, "--max-device-memory", "gib"),
        ("run", RUN, "--qualify-m", "m"),
        ("bench", BENCH, "--warmup", "count"),
        ("bench", BENCH, "--repeats", "pos_int_small"),
        ("bench", BENCH, "--steps", "steps"),
        ("bench", BENCH, "--qualify-tokens", "pos_int_small"),
        ("bench", BENCH, "--batch", "pos_int_small"),
        ("profile", PROF, "--t", "unit_t"),
    ]
    for cmd, base, opt, kind in numeric:
        for label, v in VALUES:
            e = expect_for(kind, label)
            if cmd == "bench" and e == "valid" and opt in ("--warmup", "--instrument-steps",
                                                           "--warmup-tokens"):
                e = "any"     # the CPU bench may refuse a protocol detail; not the point here
            if cmd == "bench" and opt == "--cfg":
                e = "invalid" if e == "invalid" else "any"   # the protocol needs CFG on
            if cmd == "profile" and e != "invalid":
                e = "any"     # needs a GPU
            if opt == "--batch" and label == "2.7":
                e = "invalid"
            cases.append(Case("cli-options", "%s %s %s" % (cmd, opt, label), e, "cli",
                              argv=with_opt(base, opt, [v])))
    # run --tokens: the synthetic request, its sources and its grid.
    SS = os.path.join(ctx.fx, "ck", "tinyss.json")
    for label, argv, e in [
            ("1 token", with_opt(RUNT, "--tokens", ["1"]), "valid"),
            ("beyond the 64^3 grid", with_opt(RUNT, "--tokens", ["262145"]), "invalid"),
            ("2^24 + 1", with_opt(RUNT, "--tokens", [str((1 << 24) + 1)]), "invalid"),
            ("with --manifest", RUNT + ["--manifest", GOLD], "invalid"),
            ("with --inputs", RUNT + ["--inputs", INP], "invalid"),
            ("--cond-tokens without --tokens", RUNI + ["--cond-tokens", "5"], "invalid"),
            ("--seed with --manifest", RUN + ["--seed", "3"], "invalid"),
            ("dense model, its whole 8^3 grid", ["run", "--checkpoint", SS, "--tokens", "512",
                                                 "--device", "cpu", "--steps", "1", "--out", "out"],
             "valid"),
            ("dense model, 20 tokens", ["run", "--checkpoint", SS, "--tokens", "20", "--device",
                                        "cpu", "--steps", "1", "--out", "out"], "invalid"),
            ("--cond-tokens 65536", with_opt(RUNT, "--cond-tokens", ["65536"]), "valid")]:
        cases.append(Case("cli-options", "run --tokens: " + label, e, "cli", argv=argv))
    # --interval LO HI
    for lo, hi, e in [("-5", "-1", "invalid"), ("0.5", "1", "valid"), ("1", "0", "invalid"),
                      ("nan", "1", "invalid"), ("0", "inf", "invalid"), ("0", "nan", "invalid"),
                      ("", "1", "invalid"), ("-inf", "0", "invalid"), ("1e400", "2", "invalid"),
                      ("0.2", "0.2", "valid")]:
        cases.append(Case("cli-options", "run --interval %r %r" % (lo, hi), e, "cli",
                          argv=with_opt(RUN, "--interval", [lo, hi])))
    cases.append(Case("cli-options", "run --interval one value", "invalid", "cli",
                      argv=[a for a in RUN] + ["--interval", "0.5"]))
    cases.append(Case("cli-options", "run --interval three values", "invalid", "cli",
                      argv=RUN + ["--interval", "0.1", "0.5", "0.9"]))
    cases.append(Case("cli-options", "run --cfg=-1", "invalid", "cli", argv=RUN + ["--cfg=-1"]))
    # --seed forms
    for label, v, e in [("hex", "0x10", "invalid"), ("octal-looking", "007", "any"),
                        ("plus", "+5", "any"), ("leading space", " 5", "invalid"),
                        ("trailing space", "5 ", "invalid"), ("minus zero", "-0", "any"),
                        ("u64 max", str((1 << 64) - 1), "valid"), ("u64 max+1", str(1 << 64), "invalid"),
                        ("1e3", "1e3", "invalid"), ("binary", "0b101", "invalid"),
                        ("underscore", "1_000", "invalid"), ("suffix", "5k", "invalid"),
                        ("-2^63", str(-(1 << 63)), "invalid"), ("word", "seven", "invalid")]:
        for cmd, base in [("make-checkpoint", MC), ("run", RUNI)]:
            cases.append(Case("cli-options", "%s --seed %s" % (cmd, label), e, "cli",
                              argv=with_opt(base, "--seed", [v])))
    # Unknown options, missing values, duplicated options, unknown commands.
    for cmd, base in [("make-checkpoint", MC), ("make-payloads", MP), ("run", RUN),
                      ("bench", BENCH), ("info", ["info"]), ("paths", ["paths"]),
                      ("profile", PROF), ("bench-report", ["bench-report", "--result", ctx.bench_json]),
                      ("bench-kernels", ["bench-kernels"])]:
        cases.append(Case("cli-options", "%s --bogus" % cmd, "invalid", "cli", argv=base + ["--bogus"]))
        cases.append(Case("cli-options", "%s stray word" % cmd, "invalid", "cli", argv=base + ["stray"]))
    for cmd, base, opts in [("make-checkpoint", MC, ["--out", "--seed", "--preset", "--dtype"]),
                            ("make-payloads", MP, ["--out", "--set", "--seed", "--tokens", "--cond-tokens"]),
                            ("run", RUN, ["--checkpoint", "--manifest", "--out", "--steps", "--path",
                                          "--sampler", "--enable", "--cache-dir", "--device",
                                          "--asset", "--cfg-choice"])]:
        for opt in opts:
            cases.append(Case("cli-options", "%s %s missing value" % (cmd, opt), "invalid", "cli",
                              argv=[a for a in base if a != opt] + [opt]))
            dup = with_opt(base, opt, [base[base.index(opt) + 1]]) if opt in base else None
            if dup is not None and opt not in ("--asset", "--enable"):
                val = base[base.index(opt) + 1]
                other = {"--out": "out2" if cmd != "make-checkpoint" else "ck/u", "--seed": "9",
                         "--preset": "tiny-ss", "--set": "dense-small", "--tokens": "5",
                         "--checkpoint": os.path.join(ctx.fx, "ck", "tinyss.json"),
                         "--manifest": os.path.join(ctx.fx, "pay", "manifest.json"),
                         "--steps": "3", "--device": "auto"}.get(opt, val)
                cases.append(Case("cli-options", "%s %s given twice (different)" % (cmd, opt),
                                  "invalid", "cli", argv=base + [opt, other]))
    cases.append(Case("cli-options", "run --asset twice same", "any", "cli",
                      argv=RUN + ["--asset", "a01-torus-61"]))
    cases.append(Case("cli-options", "run --asset unknown", "invalid", "cli",
                      argv=RUN + ["--asset", "nope"]))
    for label, argv in [("empty command", [""]), ("misspelt", ["runn"]), ("none", []),
                        ("dash", ["-"]), ("top-level bogus", ["--bogus", "run"]),
                        ("run --path bogus", RUN + ["--path", "bogus"]),
                        ("run --path empty", RUN + ["--path", ""]),
                        ("run --path ++", RUN + ["--path", "fast++"]),
                        ("run --enable bogus", RUN + ["--enable", "bogus"]),
                        ("run --disable empty", RUN + ["--disable", ""]),
                        ("run --sampler released-ss", RUN + ["--sampler", "released-ss"]),
                        ("run --sampler empty", RUN + ["--sampler", ""]),
                        ("run --device tpu", with_opt(RUN, "--device", ["tpu"])),
                        ("run --device cuda (no GPU)", with_opt(RUN, "--device", ["cuda"])),
                        ("run --manifest and --inputs", RUN + ["--inputs", INP]),
                        ("run --seed without --inputs", RUN + ["--seed", "3"]),
                        ("run --asset without --manifest", RUNI + ["--asset", "x"]),
                        ("run --inputs twice same file", RUNI + ["--inputs", INP]),
                        ("run --cfg-choice missing file", RUN + ["--cfg-choice", "nope.json"]),
                        ("run --cfg-choice is the manifest", RUN + ["--cfg-choice", GOLD]),
                        ("make-checkpoint --preset bogus", with_opt(MC, "--preset", ["bogus"])),
                        ("make-checkpoint --dtype f16", with_opt(MC, "--dtype", ["f16"])),
                        ("make-payloads --set bogus", with_opt(MP, "--set", ["bogus"])),
                        ("make-payloads --tokens 5,,6", with_opt(MP, "--tokens", ["5,,6"])),
                        ("make-payloads --tokens trailing comma", with_opt(MP, "--tokens", ["5,"])),
                        ("make-payloads --tokens 300000 (over the grid)", with_opt(MP, "--tokens", ["300000"])),
                        ("make-payloads --tokens 262144 (whole grid)", with_opt(MP, "--tokens", ["262144"])),
                        ("make-payloads --cond-tokens 2^31", with_opt(MP, "--cond-tokens", [str(1 << 31)])),
                        ("bench-report --result missing", ["bench-report", "--result", "nope.json"]),
                        ("bench --replot missing", ["bench", "--replot", "nope.json"]),
                        ("bench --paths bogus", with_opt(BENCH, "--paths", ["bogus"])),
                        ("bench --protocol bogus", BENCH + ["--protocol", "bogus"]),
                        ("info --json", ["info", "--json"]), ("paths", ["paths"]),
                        ("--version", ["--version"]), ("--help-paths", ["--help-paths"])]:
        e = "valid" if label in ("info --json", "paths", "--version", "--help-paths",
                                 "make-payloads --tokens 262144 (whole grid)") else "invalid"
        if label == "run --inputs twice same file":
            e = "invalid"
        cases.append(Case("cli-options", label, e, "cli", argv=argv))
    # Valid baselines (each family's command as it should run).
    for label, argv in [("baseline make-checkpoint", MC), ("baseline make-payloads", MP),
                        ("baseline run manifest", RUN), ("baseline run inputs", RUNI),
                        ("baseline bench cpu", BENCH)]:
        cases.append(Case("cli-options", label, "valid", "cli", argv=argv))
    return cases


def out_cases(ctx):
    cases = []
    CK = os.path.join(ctx.fx, "ck", "tiny.json")
    GOLD = os.path.join(ctx.fx, "gold", "manifest.json")

    def mk_file(name):
        def s(ctx, cwd, home):
            write(os.path.join(cwd, name), "a file\n")
        return s

    def mk_link(name, target):
        def s(ctx, cwd, home):
            os.symlink(target, os.path.join(cwd, name))
        return s

    def mk_copy_gold(ctx, cwd, home):
        shutil.copytree(os.path.join(ctx.fx, "gold"), os.path.join(cwd, "gold"))

    long250 = "n" * 250
    long256 = "n" * 256
    variants = [
        # label, out value, setup, expectation
        ("a file", "afile", mk_file("afile"), "invalid"),
        ("under a file", "afile/sub", mk_file("afile"), "invalid"),
        ("empty", "", None, "invalid"),
        ("250-byte name", long250, None, "valid"),
        ("256-byte name", long256, None, "invalid"),
        ("250-byte name under 250-byte dir", long250 + "/" + long250, None, "any"),
        ("/proc/self/x", "/proc/self/hostile-x", None, "invalid"),
        ("/proc/self/x/y", "/proc/self/hostile-x/y", None, "invalid"),
        ("/sys/x", "/sys/hostile-x", None, "invalid"),
        ("deep missing parent", "a/b/c/d/e/f/g", None, "any"),
        ("trailing slash", "o/", None, "any"),
        ("dot", ".", None, "any"),
        ("newline in name", "o\nx", None, "any"),
        ("leading dash", "-o", None, "any"),
        ("symlink to /proc", "lnk", mk_link("lnk", "/proc/self"), "invalid"),
        ("dangling symlink", "dang", mk_link("dang", "/tmp/hostile-does-not-exist/q"), "any"),
    ]
    for label, out, setup, e in variants:
        # make-checkpoint's --out is a prefix DIR/NAME: an existing file or link named NAME is
        # not in the way (NAME.json is written), and a 250-byte NAME is too long once suffixed.
        mc_e = ("invalid" if label in ("dot", "trailing slash") else
                "any" if label in ("a file", "250-byte name", "symlink to /proc") else e)
        cases.append(Case("out-paths", "make-checkpoint --out %s" % label, mc_e, "cli",
                          argv=["make-checkpoint", "--preset", "tiny", "--out",
                                out if label not in ("250-byte name", "256-byte name") else out],
                          setup=setup))
        cases.append(Case("out-paths", "make-payloads --out %s" % label, e, "cli",
                          argv=["make-payloads", "--set", "small", "--tokens", "5", "--out", out],
                          setup=setup))
        cases.append(Case("out-paths", "run --out %s" % label, e, "cli",
                          argv=["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                                "a00-sphere-1", "--device", "cpu", "--steps", "1", "--out", out],
                          setup=setup))
        cases.append(Case("out-paths", "bench-report --out %s" % label, e, "cli",
                          argv=["bench-report", "--result", ctx.bench_json, "--out", out],
                          setup=setup))
    # Output onto its own input; the checkpoint's files as outputs.
    cases.append(Case("out-paths", "run --out the manifest's own folder", "invalid", "cli",
                      argv=["run", "--checkpoint", CK, "--manifest", "gold/manifest.json",
                            "--device", "cpu", "--steps", "1", "--out", "gold"],
                      setup=mk_copy_gold))
    cases.append(Case("out-paths", "make-checkpoint --out over a folder of that name", "invalid",
                      "cli", argv=["make-checkpoint", "--preset", "tiny", "--out", "x"],
                      setup=lambda c, cwd, h: (os.makedirs(os.path.join(cwd, "x.json")),)))
    cases.append(Case("out-paths", "make-payloads --out over manifest.json folder", "invalid",
                      "cli", argv=["make-payloads", "--set", "small", "--tokens", "5", "--out", "p"],
                      setup=lambda c, cwd, h: os.makedirs(os.path.join(cwd, "p", "manifest.json"))))
    cases.append(Case("out-paths", "run --cache-dir a file", "valid", "cli",
                      argv=["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                            "a00-sphere-1", "--device", "cpu", "--steps", "1", "--out", "out",
                            "--cache-dir", "afile"], setup=mk_file("afile")))
    cases.append(Case("out-paths", "run --cache-dir /proc/self/x", "valid", "cli",
                      argv=["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                            "a00-sphere-1", "--device", "cpu", "--steps", "1", "--out", "out",
                            "--cache-dir", "/proc/self/hostile"]))
    return cases


def signal_cases(ctx):
    cases = []
    CK = os.path.join(ctx.fx, "ck", "tiny.json")
    GOLD = os.path.join(ctx.fx, "gold", "manifest.json")
    small_trig = [(signal.SIGINT, 0.05), (signal.SIGINT, 0.3), (signal.SIGINT, "temp"),
                  (signal.SIGTERM, 0.05), (signal.SIGTERM, 0.3), (signal.SIGTERM, 1.0),
                  (signal.SIGTERM, "temp"), (signal.SIGHUP, "temp")]
    targets = [
        # label, argv, triggers, RLIMIT_FSIZE values
        ("make-checkpoint tiny f32", ["make-checkpoint", "--preset", "tiny", "--dtype", "f32", "--out", "ck/t"],
         small_trig, [0, 4096, 1 << 20]),
        ("make-payloads benchmark", ["make-payloads", "--set", "benchmark", "--tokens",
                                     "20000,20000,20000,20000", "--out", "pay"],
         small_trig, [0, 4096, 1 << 20, 20 << 20]),
        ("make-payloads dense", ["make-payloads", "--set", "dense", "--out", "pay"],
         small_trig, [0, 4096, 1 << 20]),
        ("run manifest", ["run", "--checkpoint", CK, "--manifest", GOLD, "--device", "cpu",
                          "--steps", "4", "--out", "out"],
         small_trig, [0, 4096]),
    ]
    for label, argv, trigs, fsizes in targets:
        for sig, trig in trigs:
            cases.append(Case("signals", "%s %s at %s" % (label, sig.name, trig), "interrupt",
                              "cli", argv=argv, signal_spec=(sig, trig)))
        for fsize in fsizes:
            cases.append(Case("signals", "%s RLIMIT_FSIZE %d" % (label, fsize), "interrupt",
                              "cli", argv=argv, fsize=fsize))
    # Injected write and allocation failures (core/fault.h), for the leftovers.
    for label, argv, _, _ in targets[:3]:
        for n in (1, 2, 3, 5):
            cases.append(Case("signals", "%s SPARSE3D_FAULT_WRITE=%d" % (label, n), "any", "cli",
                              argv=argv, env={"SPARSE3D_FAULT_WRITE": str(n)}))
    for v in ("-1", "abc", "", "1e3", str(1 << 64)):
        cases.append(Case("signals", "SPARSE3D_FAULT_WRITE=%r" % v,
                          "any" if v == "" else "invalid", "cli",
                          argv=["make-checkpoint", "--preset", "tiny", "--out", "ck/t"],
                          env={"SPARSE3D_FAULT_WRITE": v}))
    return cases


# -- the qualification cache folder --

# Root without the capabilities that bypass file permissions: a folder of mode 000 is refused
# (EACCES) as it is to an ordinary user, while the interpreter under /root stays reachable.
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner",
          "--inh-caps=-dac_override,-dac_read_search,-fowner", "--"]


def in_mount_namespace(script):
    """A wrap that runs `script` (sh, mounts) in a mount namespace of the case's own, then the
    case's command: the mounts are gone with the process."""
    return ["unshare", "-m", "sh", "-c", script + ' && exec "$@"', "sh"]


def cache_folder_cases(ctx):
    """Every way the cache folder can be out of reach: the request must run (a probe and a
    log line, never a failed request), from the command line and from Python."""
    CK = os.path.join(ctx.fx, "ck", "tiny.json")
    RUN = ["run", "--checkpoint", CK, "--tokens", "20", "--cond-tokens", "5", "--steps", "1",
           "--device", "cpu", "--out", "out"]
    PY = ("c, cond = req((20,))\n"
          "e = s3d.Engine(TINY, device='cpu'%s)\n"
          "e.sample(c, cond, seed=1, sampler={'steps': 1})\n")
    default_env = {"SPARSE3D_CACHE_DIR": None, "XDG_CACHE_HOME": None}

    def mkdirs(*paths, mode=None):
        def s(ctx, cwd, home):
            for p in paths:
                p = p.replace("@CWD", cwd).replace("@HOME", home)
                os.makedirs(p, exist_ok=True)
            if mode is not None:
                os.chmod(paths[0].replace("@CWD", cwd).replace("@HOME", home), mode)
        return s

    def link(path, target, make=()):
        def s(ctx, cwd, home):
            for d in make:
                os.makedirs(d.replace("@CWD", cwd).replace("@HOME", home), exist_ok=True)
            os.symlink(target, path.replace("@CWD", cwd).replace("@HOME", home))
        return s

    def file_at(path, data=b"", mode=None, fifo=False):
        def s(ctx, cwd, home):
            p = path.replace("@CWD", cwd).replace("@HOME", home)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if fifo:
                os.mkfifo(p)
            else:
                write(p, data)
            if mode is not None:
                os.chmod(p, mode)
        return s

    def home_mode(mode):
        def s(ctx, cwd, home):
            os.makedirs(os.path.join(home, ".cache"), exist_ok=True)
            os.chmod(home, mode)
        return s

    ro = in_mount_namespace('mount -t tmpfs -o size=1m tmpfs "@CWD/ro" && mkdir "@CWD/ro/cache" '
                            '&& mount -o remount,ro "@CWD/ro"')
    full = in_mount_namespace('mount -t tmpfs -o size=16k tmpfs "@CWD/full" && '
                              '(dd if=/dev/zero of="@CWD/full/fill" bs=4k count=64 2>/dev/null; true)')
    conditions = [
        # label, --cache-dir (None: the default folder), setup, env, wrap
        ("a folder under a folder of mode 000 (EACCES)", "@CWD/q/sub", mkdirs("@CWD/q/sub", mode=0),
         {}, NO_DAC),
        ("a folder of mode 555 (EACCES on write)", "@CWD/q", mkdirs("@CWD/q", mode=0o555), {}, NO_DAC),
        ("qualification.json of mode 000", "@CWD/q", file_at("@CWD/q/qualification.json", b"{}", 0),
         {}, NO_DAC),
        ("default folder, HOME of mode 000", None, home_mode(0), default_env, NO_DAC),
        ("a symbolic-link loop (ELOOP)", "@CWD/loop", link("@CWD/loop", "loop"), {}, []),
        ("default folder, ~/.cache a link loop", None, link("@HOME/.cache", ".cache"),
         default_env, []),
        ("SPARSE3D_CACHE_DIR a link loop", None, link("@CWD/loop", "loop"),
         {"SPARSE3D_CACHE_DIR": "@CWD/loop"}, []),
        ("a read-only file system (EROFS)", "@CWD/ro/cache", mkdirs("@CWD/ro"), {}, ro),
        ("a full file system (ENOSPC)", "@CWD/full/cache", mkdirs("@CWD/full"), {}, full),
        ("a regular file", "@CWD/f", file_at("@CWD/f", b"x"), {}, []),
        ("qualification.json a folder", "@CWD/q", mkdirs("@CWD/q/qualification.json"), {}, []),
        ("qualification.json a FIFO", "@CWD/q", file_at("@CWD/q/qualification.json", fifo=True),
         {}, []),
        ("qualification.json a link to /dev/zero", "@CWD/q",
         link("@CWD/q/qualification.json", "/dev/zero", make=("@CWD/q",)), {}, []),
        ("/dev/null", "/dev/null", None, {}, []),
        ("a path through /proc that does not exist", "/proc/1/root/nonexistent/x", None, {}, []),
    ]
    cases = []
    for label, folder, setup, env, wrap in conditions:
        argv = RUN + (["--cache-dir", folder] if folder else [])
        cases.append(Case("cache-folder", "run: " + label, "valid", "cli", argv=argv,
                          setup=setup, env=env, wrap=wrap))
        arg = ", cache_dir=%r" % folder if folder else ""
        cases.append(Case("cache-folder", "Engine: " + label, "valid", "py", code=PY % arg,
                          setup=setup, env=env, wrap=wrap))
    return cases


# -- corrupt files --

def ck_json_variants():
    base = {"name": "SLatFlowModel",
            "args": {"cond_channels": 64, "dtype": "bfloat16", "in_channels": 32,
                     "initialization": "scaled", "mlp_ratio": 4.0, "model_channels": 128,
                     "num_blocks": 2, "num_heads": 2, "out_channels": 32, "pe_mode": "rope",
                     "qk_rms_norm": True, "qk_rms_norm_cross": True, "resolution": 64,
                     "rope_freq": [1.0, 10000.0], "share_mod": True}}
    out = [("valid copy", json.dumps(base), "valid"),
           ("list", "[]", "invalid"), ("list of the config", json.dumps([base]), "invalid"),
           ("string", '"SLatFlowModel"', "invalid"), ("null", "null", "invalid"),
           ("number", "1", "invalid"), ("empty object", "{}", "invalid"), ("empty file", "", "invalid"),
           ("trailing garbage", json.dumps(base) + " x", "invalid"),
           ("truncated", json.dumps(base)[:-7], "invalid"),
           ("BOM", "\ufeff" + json.dumps(base), "any"),
           ("NaN literal", json.dumps(base).replace("4.0", "NaN"), "invalid"),
           ("Infinity literal", json.dumps(base).replace("4.0", "Infinity"), "invalid"),
           ("duplicate key", json.dumps(base)[:-1] + ', "name": "SLatFlowModel"}', "invalid"),
           ("duplicate arg", json.dumps(base).replace('"num_blocks": 2', '"num_blocks": 2, "num_blocks": 3'), "invalid"),
           ("unknown top key", json.dumps(dict(base, extra=1)), "invalid"),
           ("unknown arg", json.dumps(dict(base, args=dict(base["args"], bogus=1))), "invalid"),
           ("args a list", json.dumps(dict(base, args=[1, 2])), "invalid"),
           ("name wrong", json.dumps(dict(base, name="Bogus")), "invalid"),
           ("name a number", json.dumps(dict(base, name=5)), "invalid"),
           ("deep nesting 100", "[" * 100 + "]" * 100, "invalid"),
           ("deep nesting 100000", "[" * 100000 + "]" * 100000, "invalid"),
           ("deep in args", json.dumps(dict(base, args=dict(base["args"], x=None))).replace("null", "[" * 5000 + "]" * 5000), "invalid"),
           ("invalid UTF-8", json.dumps(base).replace("rope", "r\udcffpe"), "invalid"),
           ("1 MB name", json.dumps(dict(base, name="S" * (1 << 20))), "invalid")]
    for key in ("num_blocks", "model_channels", "num_heads", "cond_channels", "out_channels",
                "resolution"):
        for label, v in [("-1", -1), ("0", 0), ("2.7", 2.7), ("2^64", 1 << 64), ("2^31", 1 << 31),
                         ("string", "2"), ("null", None)]:
            e = "invalid"
            if key == "num_heads" and label == "null":
                # Optional[int] in the original: null means absent, and the heads come from
                # num_head_channels, as TRELLIS.2's own loader does.
                e = "valid"
            args = dict(base["args"], **{key: v})
            out.append(("%s %s" % (key, label), json.dumps(dict(base, args=args)), e))
    for key, v in [("rope_freq", [1.0]), ("rope_freq", "x"), ("rope_freq", [float("nan"), 1.0]),
                   ("pe_mode", "bogus"), ("dtype", "float8"), ("qk_rms_norm", "yes"),
                   ("share_mod", 1)]:
        args = dict(base["args"], **{key: v})
        out.append(("%s %r" % (key, v), json.dumps(dict(base, args=args)).replace("NaN", "NaN"), "invalid"))
    return out


def st_variants(src):
    """Corruptions of a valid safetensors file (bytes)."""
    header, data, n = st_read(src)
    raw = open(src, "rb").read()
    hbytes = raw[8:8 + n]
    names = [k for k in header if k != "__metadata__"]
    first = names[0]
    out = [("truncated to 0", b""), ("truncated to 4", raw[:4]), ("truncated to 8", raw[:8]),
           ("truncated in header", raw[:8 + n // 2]), ("truncated after header", raw[:8 + n]),
           ("one byte short", raw[:-1]), ("one byte long", raw + b"\0"),
           ("header length 2^64-1", struct.pack("<Q", M64) + raw[8:]),
           ("header length 2^63", struct.pack("<Q", 1 << 63) + raw[8:]),
           ("header length 2^40", struct.pack("<Q", 1 << 40) + raw[8:]),
           ("header length > file", struct.pack("<Q", len(raw)) + raw[8:]),
           ("header length 0", struct.pack("<Q", 0) + raw[8:]),
           ("header not JSON", struct.pack("<Q", n) + b"\xff" * n + raw[8 + n:]),
           ("header a list", st_bytes([], header_override=[1, 2, 3]) + data),
           ("leading junk", b"JUNK" + raw)]

    def redo(h):
        hb = json.dumps(h).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        return struct.pack("<Q", len(hb)) + hb + data

    def mod(fn):
        h = json.loads(hbytes)
        fn(h)
        return redo(h)

    out += [
        ("dtype mismatch F32", mod(lambda h: h[first].update(dtype="F32"))),
        ("dtype unknown", mod(lambda h: h[first].update(dtype="Q8"))),
        ("dtype F16", mod(lambda h: h[first].update(dtype="F16"))),
        ("shape negative", mod(lambda h: h[first].update(shape=[-1] + h[first]["shape"][1:]))),
        ("shape huge", mod(lambda h: h[first].update(shape=[1 << 62, 1 << 62]))),
        ("shape 2^64", mod(lambda h: h[first].update(shape=[1 << 64]))),
        ("offsets overlapping", mod(lambda h: h[names[1]].update(
            data_offsets=[h[names[1]]["data_offsets"][0] - 2, h[names[1]]["data_offsets"][1] - 2]))),
        ("offsets reversed", mod(lambda h: h[first].update(data_offsets=h[first]["data_offsets"][::-1]))),
        ("offsets past end", mod(lambda h: h[names[-1]].update(
            data_offsets=[h[names[-1]]["data_offsets"][0], h[names[-1]]["data_offsets"][1] + 64]))),
        ("offset negative", mod(lambda h: h[first].update(data_offsets=[-4, 0]))),
        ("offset float", mod(lambda h: h[first].update(data_offsets=[0.0, h[first]["data_offsets"][1]]))),
        ("unknown entry field", mod(lambda h: h[first].update(extra=1))),
        ("entry a list", mod(lambda h: h.update({first: [1]}))),
        ("tensor missing", mod(lambda h: h.pop(names[-1]))),
        ("metadata not strings", mod(lambda h: h.update(__metadata__={"a": 1}))),
        ("duplicate name", None),
        ("NaN weight", None),
        ("Inf weight", None),
    ]
    res = []
    for label, b in out:
        if label == "duplicate name":
            hb = hbytes.decode().rstrip()
            k = '"%s":' % first
            i = hb.index(k)
            j = hb.index("}", i) + 1
            dup = hb[:-1] + "," + hb[i:j] + "}"
            b = struct.pack("<Q", len(dup)) + dup.encode() + data
        elif label in ("NaN weight", "Inf weight"):
            h = json.loads(hbytes)
            name = [k for k in names if h[k]["dtype"] in ("BF16", "F32")][-1]
            o = 8 + n + h[name]["data_offsets"][0]
            b = bytearray(raw)
            if h[name]["dtype"] == "BF16":
                b[o:o + 2] = (b"\xc0\x7f" if label == "NaN weight" else b"\x80\x7f")
            else:
                b[o:o + 4] = struct.pack("<f", float("nan") if label == "NaN weight" else float("inf"))
            b = bytes(b)
        res.append((label, b))
    return res


def corrupt_cases(ctx):
    cases = []
    fx = ctx.fx
    CK = os.path.join(fx, "ck", "tiny.json")
    CKS = os.path.join(fx, "ck", "tiny.safetensors")
    GOLD = os.path.join(fx, "gold", "manifest.json")

    def run_ck(ck):
        return ["run", "--checkpoint", ck, "--manifest", GOLD, "--asset", "a00-sphere-1",
                "--device", "cpu", "--steps", "1", "--out", "out"]

    # Checkpoint JSON.
    for label, text, e in ck_json_variants():
        def setup(ctx, cwd, home, text=text):
            write(os.path.join(cwd, "c", "m.json"), text.encode("utf-8", "surrogateescape"))
            os.symlink(CKS, os.path.join(cwd, "c", "m.safetensors"))
        cases.append(Case("corrupt-files", "checkpoint json %s" % label, e, "cli",
                          argv=run_ck("c/m.json"), setup=setup))
    # Python: the same JSON through Engine().
    for label, text, e in ck_json_variants()[:14]:
        def setup(ctx, cwd, home, text=text):
            write(os.path.join(cwd, "c", "m.json"), text.encode("utf-8", "surrogateescape"))
            os.symlink(CKS, os.path.join(cwd, "c", "m.safetensors"))
        cases.append(Case("corrupt-files", "python Engine checkpoint json %s" % label, e, "py",
                          code="eng('@CWD/c/m.json')", setup=setup, names=["m.json", "checkpoint"]))
    # Checkpoint safetensors.
    for label, b in st_variants(CKS):
        def setup(ctx, cwd, home, b=b):
            write(os.path.join(cwd, "c", "m.safetensors"), b)
            os.symlink(CK, os.path.join(cwd, "c", "m.json"))
        cases.append(Case("corrupt-files", "checkpoint safetensors %s" % label,
                          "any" if label == "dtype F16" else "invalid", "cli",
                          argv=run_ck("c/m.json"), setup=setup))

    def sparse_ck(ctx, cwd, home):
        h, data, n = st_read(CKS)
        hb = open(CKS, "rb").read()[:8 + n]
        p = os.path.join(cwd, "c", "m.safetensors")
        write(p, hb + data)
        os.truncate(p, 1 << 34)   # a 16 GiB sparse file: trailing bytes
        os.symlink(CK, os.path.join(cwd, "c", "m.json"))
    cases.append(Case("corrupt-files", "checkpoint safetensors sparse 16 GiB tail", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=sparse_ck))
    cases.append(Case("corrupt-files", "checkpoint safetensors missing", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c")),
                          os.symlink(CK, os.path.join(cwd, "c", "m.json")))))
    cases.append(Case("corrupt-files", "checkpoint safetensors is a folder", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c", "m.safetensors")),
                          os.symlink(CK, os.path.join(cwd, "c", "m.json")))))
    cases.append(Case("corrupt-files", "checkpoint json is a FIFO", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c")), os.mkfifo(os.path.join(cwd, "c", "m.json")),
                          os.symlink(CKS, os.path.join(cwd, "c", "m.safetensors")))))
    cases.append(Case("corrupt-files", "checkpoint json is /dev/zero", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c")), os.symlink("/dev/zero", os.path.join(cwd, "c", "m.json")),
                          os.symlink(CKS, os.path.join(cwd, "c", "m.safetensors")))))
    cases.append(Case("corrupt-files", "checkpoint safetensors is /dev/zero", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c")), os.symlink("/dev/zero", os.path.join(cwd, "c", "m.safetensors")),
                          os.symlink(CK, os.path.join(cwd, "c", "m.json")))))
    cases.append(Case("corrupt-files", "checkpoint of another preset's weights", "invalid", "cli",
                      argv=run_ck("c/m.json"), setup=lambda c, cwd, h: (
                          os.makedirs(os.path.join(cwd, "c")),
                          os.symlink(os.path.join(fx, "ck", "tinyss.safetensors"), os.path.join(cwd, "c", "m.safetensors")),
                          os.symlink(CK, os.path.join(cwd, "c", "m.json")))))

    # Payload manifest and assets (a copy of the golden inputs, then a change).
    gold_m = json.load(open(GOLD))

    def pay_setup(change):
        def s(ctx, cwd, home):
            d = os.path.join(cwd, "p")
            shutil.copytree(os.path.join(fx, "gold"), d)
            m = json.loads(json.dumps(gold_m))
            r = change(m, d)
            if r is None:
                write(os.path.join(d, "manifest.json"), json.dumps(m))
            else:
                write(os.path.join(d, "manifest.json"), r)
        return s

    def asset_file(d, i=0):
        return os.path.join(d, gold_m["assets"][i]["file"])

    def rm_asset(m, d):
        os.remove(asset_file(d, 0))

    def link_passwd(m, d):
        os.remove(asset_file(d, 0))
        os.symlink("/etc/passwd", asset_file(d, 0))

    def link_zero(m, d):
        os.remove(asset_file(d, 0))
        os.symlink("/dev/zero", asset_file(d, 0))

    def hardlink_text(m, d):
        t = os.path.join(d, "notes.txt")
        write(t, "just text, not a safetensors file\n" * 10)
        os.remove(asset_file(d, 0))
        os.link(t, asset_file(d, 0))

    def fifo_asset(m, d):
        os.remove(asset_file(d, 0))
        os.mkfifo(asset_file(d, 0))

    def dir_asset(m, d):
        os.remove(asset_file(d, 0))
        os.makedirs(asset_file(d, 0))

    def dotdot(m, d):
        m["assets"][0]["file"] = "../../../../../../etc/passwd"

    def absolute(m, d):
        m["assets"][0]["file"] = "/etc/hostname"

    def self_manifest(m, d):
        m["assets"][0]["file"] = "manifest.json"

    def tokens_wrong(m, d):
        m["assets"][0]["tokens"] = 2

    def tokens_huge(m, d):
        m["assets"][0]["tokens"] = 1 << 62

    def dup_name(m, d):
        m["assets"][1]["name"] = m["assets"][0]["name"]

    def empty_assets(m, d):
        m["assets"] = []

    def unknown_key(m, d):
        m["bogus"] = 1

    def cond_tokens_zero(m, d):
        m["cond_tokens"] = 0

    def cond_channels_wrong(m, d):
        m["cond_channels"] = 65

    def grid_huge(m, d):
        m["grid"] = 1 << 40

    def as_list(m, d):
        return json.dumps([m])

    def version2(m, d):
        m["version"] = 2

    def seed_negative(m, d):
        m["assets"][0]["noise_seed"] = -1

    def seed_float(m, d):
        m["assets"][0]["noise_seed"] = 1.5

    def name_slash(m, d):
        m["assets"][0]["name"] = "../../escape"

    def name_empty(m, d):
        m["assets"][0]["name"] = ""

    def deep(m, d):
        return "[" * 200000 + "]" * 200000

    def big_empty_objs(m, d):
        return "[" + ",".join(["{}"] * 300000) + "]"

    def asset_bytes(fn):
        def change(m, d):
            p = asset_file(d, 1)
            h, data, n = st_read(p)
            write(p, fn(h, data, n, open(p, "rb").read()))
        return change

    def coords_arr(h, data):
        c = h["coords"]
        a = np.frombuffer(data[c["data_offsets"][0]:c["data_offsets"][1]], np.int32).reshape(c["shape"]).copy()
        return a

    def with_coords(fn):
        def change(h, data, n, raw):
            a = fn(coords_arr(h, data))
            arrays = {}
            for k, v in h.items():
                if k == "__metadata__":
                    continue
                if k == "coords":
                    arrays[k] = a
                else:
                    arrays[k] = np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                                              {"F32": np.float32, "I32": np.int32, "BF16": np.uint16}[v["dtype"]]).reshape(v["shape"])
            t = st_from_arrays(arrays)
            # bf16 arrays were read as uint16: label them back.
            t = [(nm, h[nm]["dtype"] if h[nm]["dtype"] == "BF16" else dt, sh, rw) for nm, dt, sh, rw in t]
            return st_bytes(t, metadata=h.get("__metadata__"))
        return change

    def cond_nan(h, data, n, raw):
        c = h["cond"]
        o = 8 + n + c["data_offsets"][0]
        b = bytearray(raw)
        b[o:o + 4] = struct.pack("<f", float("nan")) if c["dtype"] == "F32" else b"\xc0\x7f\xc0\x7f"
        return bytes(b)

    def sparse_coords(h, data, n, raw):
        hh = dict(h)
        hh.pop("__metadata__", None)
        rows = 1 << 26
        t = [("coords", "I32", [rows, 4], b"")]
        off = rows * 16
        head = {"coords": {"dtype": "I32", "shape": [rows, 4], "data_offsets": [0, off]}}
        for k, v in h.items():
            if k in ("coords", "__metadata__"):
                continue
            size = v["data_offsets"][1] - v["data_offsets"][0]
            head[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + size]}
            off += size
        return st_bytes([], header_override=head)   # extended by truncate below

    fam = "corrupt-files"
    pays = [("asset missing", rm_asset, "invalid"), ("asset -> /etc/passwd", link_passwd, "invalid"),
            ("asset -> /dev/zero", link_zero, "invalid"), ("asset hard link to a text file", hardlink_text, "invalid"),
            ("asset is a FIFO", fifo_asset, "invalid"), ("asset is a folder", dir_asset, "invalid"),
            ("asset path ../", dotdot, "invalid"), ("asset path absolute", absolute, "invalid"),
            ("asset is the manifest", self_manifest, "invalid"), ("tokens wrong", tokens_wrong, "invalid"),
            ("tokens 2^62", tokens_huge, "invalid"), ("duplicate asset name", dup_name, "invalid"),
            ("no assets", empty_assets, "any"), ("unknown key", unknown_key, "invalid"),
            ("cond_tokens 0", cond_tokens_zero, "invalid"), ("cond_channels 65", cond_channels_wrong, "invalid"),
            ("grid 2^40", grid_huge, "invalid"), ("manifest a list", as_list, "invalid"),
            ("version 2", version2, "invalid"), ("noise_seed -1", seed_negative, "invalid"),
            ("noise_seed 1.5", seed_float, "invalid"), ("asset name ../../escape", name_slash, "invalid"),
            ("asset name empty", name_empty, "invalid"), ("manifest nested 200000", deep, "invalid"),
            ("manifest 300000 empty objects", big_empty_objs, "invalid"),
            ("asset cond NaN", asset_bytes(cond_nan), "invalid"),
            ("asset coords unsorted", asset_bytes(with_coords(lambda a: a[::-1].copy())), "invalid"),
            ("asset coords duplicate", asset_bytes(with_coords(lambda a: np.concatenate([a[:1], a[:-1]]))), "invalid"),
            ("asset coords out of grid", asset_bytes(with_coords(lambda a: (a.__setitem__((0, 1), 64), a)[1])), "invalid"),
            ("asset coords negative", asset_bytes(with_coords(lambda a: (a.__setitem__((0, 2), -1), a)[1])), "invalid"),
            ("asset coords batch 1", asset_bytes(with_coords(lambda a: (a.__setitem__((slice(None), 0), 1), a)[1])), "invalid"),
            ("asset coords 2^31-1", asset_bytes(with_coords(lambda a: (a.__setitem__((0, 3), 2 ** 31 - 1), a)[1])), "invalid")]
    for label, change, e in pays:
        cases.append(Case(fam, "manifest %s" % label, e, "cli",
                          argv=["run", "--checkpoint", CK, "--manifest", "p/manifest.json",
                                "--device", "cpu", "--steps", "1", "--out", "out"],
                          setup=pay_setup(change)))

    def sparse_asset(ctx, cwd, home):
        pay_setup(lambda m, d: None)(ctx, cwd, home)
        p = asset_file(os.path.join(cwd, "p"), 1)
        h, data, n = st_read(p)
        b = sparse_coords(h, data, n, None)
        write(p, b)
        total = 8 + struct.unpack("<Q", b[:8])[0] + max(v["data_offsets"][1] for k, v in
                                                       json.loads(b[8:]).items())
        os.truncate(p, total)
    cases.append(Case(fam, "manifest asset header of 2^26 rows over a sparse file", "invalid", "cli",
                      argv=["run", "--checkpoint", CK, "--manifest", "p/manifest.json", "--device",
                            "cpu", "--steps", "1", "--out", "out"], setup=sparse_asset))
    # Inputs files (--inputs).
    rng = np.random.default_rng(9)
    flat = np.sort(rng.choice(64 ** 3, size=30, replace=False))
    xyz = np.stack(np.unravel_index(flat, (64, 64, 64)), axis=1)
    coords = np.concatenate([np.zeros((30, 1)), xyz], axis=1).astype(np.int32)
    cond = rng.standard_normal((9, 64)).astype(np.float32)
    noise = rng.standard_normal((30, 32)).astype(np.float32)

    def inp(arrays):
        return lambda ctx, cwd, home: write(os.path.join(cwd, "in", "r.safetensors"), st_bytes(st_from_arrays(arrays)))

    def c2(fn):
        a = coords.copy()
        fn(a)
        return a
    nan_cond = cond.copy(); nan_cond[3, 5] = np.nan
    inf_noise = noise.copy(); inf_noise[0, 0] = np.inf
    variants = [
        ("valid", {"coords": coords, "cond": cond}, "valid"),
        ("valid with noise", {"coords": coords, "cond": cond, "noise": noise}, "valid"),
        ("cond 3d", {"coords": coords, "cond": cond[None]}, "valid"),
        ("missing cond", {"coords": coords}, "invalid"),
        ("missing coords", {"cond": cond}, "invalid"),
        ("extra tensor", {"coords": coords, "cond": cond, "bogus": cond}, "invalid"),
        ("coords int64", {"coords": coords.astype(np.int64), "cond": cond}, "invalid"),
        ("coords float", {"coords": coords.astype(np.float32), "cond": cond}, "invalid"),
        ("cond f64", {"coords": coords, "cond": cond.astype(np.float64)}, "invalid"),
        ("cond f16", {"coords": coords, "cond": cond.astype(np.float16)}, "invalid"),
        ("cond NaN", {"coords": coords, "cond": nan_cond}, "invalid"),
        ("noise Inf", {"coords": coords, "cond": cond, "noise": inf_noise}, "invalid"),
        ("noise wrong rows", {"coords": coords, "cond": cond, "noise": noise[:29]}, "invalid"),
        ("noise wrong channels", {"coords": coords, "cond": cond, "noise": noise[:, :31]}, "invalid"),
        ("cond wrong channels", {"coords": coords, "cond": cond[:, :63]}, "invalid"),
        ("cond 0 tokens", {"coords": coords, "cond": cond[:0]}, "invalid"),
        ("coords zero rows", {"coords": coords[:0], "cond": cond}, "invalid"),
        ("coords [N,3]", {"coords": coords[:, :3], "cond": cond}, "invalid"),
        ("coords 1-d", {"coords": coords.reshape(-1), "cond": cond}, "invalid"),
        # docs/CLI.md: 0 <= x, y, z < 65536 for an inputs file (the model's grid is not named).
        ("coords past the model grid", {"coords": c2(lambda a: a.__setitem__((0, 1), 64)), "cond": cond}, "any"),
        ("coords 65535", {"coords": c2(lambda a: a.__setitem__((0, 1), 65535)), "cond": cond}, "any"),
        ("coords 65536", {"coords": c2(lambda a: a.__setitem__((0, 1), 65536)), "cond": cond}, "invalid"),
        ("coords negative", {"coords": c2(lambda a: a.__setitem__((0, 1), -1)), "cond": cond}, "invalid"),
        ("coords batch 1 of 1", {"coords": c2(lambda a: a.__setitem__((slice(None), 0), 1)), "cond": cond}, "invalid"),
        ("coords batch order", {"coords": c2(lambda a: a.__setitem__((slice(0, 15), 0), 1)), "cond": np.stack([cond, cond])}, "invalid"),
        ("coords duplicate row", {"coords": c2(lambda a: a.__setitem__(1, a[0])), "cond": cond}, "any"),
        ("coords batch -1", {"coords": c2(lambda a: a.__setitem__((0, 0), -1)), "cond": cond}, "invalid"),
        ("cond batch 2, coords batch 1", {"coords": coords, "cond": np.stack([cond, cond])}, "invalid"),
    ]
    for label, arrays, e in variants:
        cases.append(Case(fam, "inputs %s" % label, e, "cli",
                          argv=["run", "--checkpoint", CK, "--inputs", "in/r.safetensors",
                                "--device", "cpu", "--steps", "1", "--out", "out"],
                          setup=inp(arrays)))
    # Raw safetensors corruptions of the inputs file.
    src = os.path.join(fx, "inputs", "req.safetensors")
    for label, b in st_variants(src)[:12]:
        cases.append(Case(fam, "inputs safetensors %s" % label, "invalid", "cli",
                          argv=["run", "--checkpoint", CK, "--inputs", "in/r.safetensors",
                                "--device", "cpu", "--steps", "1", "--out", "out"],
                          setup=lambda c, cwd, h, b=b: write(os.path.join(cwd, "in", "r.safetensors"), b)))
    # bench-report / bench --replot / --cfg-choice with corrupt result JSON.
    for label, text in [("list", "[]"), ("empty", ""), ("deep", "[" * 100000 + "]" * 100000),
                        ("huge number", '{"version": 1e400}'), ("2^64", '{"version": %d}' % (1 << 64)),
                        ("dup keys", '{"a": 1, "a": 2}'), ("NaN", '{"a": NaN}')]:
        for cmd in ("bench-report", "cfg-choice", "replot"):
            argv = {"bench-report": ["bench-report", "--result", "r.json", "--out", "rep"],
                    "replot": ["bench", "--replot", "r.json"],
                    "cfg-choice": ["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                                   "a00-sphere-1", "--device", "cpu", "--steps", "1", "--out",
                                   "out", "--cfg-choice", "r.json"]}[cmd]
            cases.append(Case(fam, "%s result json %s" % (cmd, label), "invalid", "cli", argv=argv,
                              setup=lambda c, cwd, h, t=text: write(os.path.join(cwd, "r.json"), t)))
    return cases


def cache_cases(ctx):
    """Qualification cache entries forged with a recomputed key and checksum."""
    cases = []
    q = os.path.join(ctx.fx, "cache", "qualification.json")
    if not os.path.exists(q):
        return cases
    doc = json.load(open(q))
    (key0, e0), = list(doc["entries"].items())[:1]

    def forged(mutate, keep_key=False, raw=None):
        def s(ctx, cwd, home):
            d = os.path.join(home, "cache")
            os.makedirs(d, exist_ok=True)
            if raw is not None:
                write(os.path.join(d, "qualification.json"), raw)
                return
            e = json.loads(json.dumps(e0))
            mutate(e)
            e["checksum"] = cache_checksum(e)
            k = key0 if keep_key else cache_key(e)
            write(os.path.join(d, "qualification.json"),
                  json.dumps({"format": doc["format"], "version": doc["version"], "entries": {k: e}}))
        return s

    # The request must run (a cache entry is never an error); a forged verdict it refuses is
    # counted; one it uses when it should not is wrongly accepted.
    body = ("e = eng()\nc, cond = req((20,))\nout = e.sample(c, cond, seed=1, sampler={'steps': 2})\n"
            "import numpy as _n\nassert _n.isfinite(out).all()\nk = e.counters()\n"
            "ref = [v for kk, v in k.items() if 'refus' in kk]\nhit = [v for kk, v in k.items() if 'hit' in kk]\n"
            "q = e.qualification()\n")
    must_refuse = body + ("if not any(ref):\n    raise Wrong('forged entry not refused: %s' % "
                          "{kk: v for kk, v in k.items() if 'qualif' in kk})\n")

    def setr(path, v):
        def m(e):
            cur = e
            for p in path[:-1]:
                cur = cur[p]
            cur[path[-1]] = v
        return m
    ok_reason = setr(["result", "reason"], "")
    variants = [
        ("genuine entry", lambda e: None, body, "valid"),
        ("verdict ok with a reason", lambda e: (e["result"].update(ok=True, reason="M=2^62")), must_refuse, "valid"),
        ("verdict not ok without a reason", lambda e: e["result"].update(ok=False, reason=""), must_refuse, "valid"),
        ("facts not strings", lambda e: e["result"].update(facts=[1 << 62]), must_refuse, "valid"),
        ("facts absurd M", lambda e: e["result"].update(facts=["M=%d" % (1 << 62), "M=-1"]), body, "valid"),
        ("result extra key M", lambda e: e["result"].update(M=1 << 62), must_refuse, "valid"),
        ("result a list", lambda e: e.update(result=[1]), must_refuse, "valid"),
        ("shapes context_tokens 2^62", lambda e: e["shapes"]["probe"].update(context_tokens=1 << 62), body, "valid"),
        ("probe_queries -1", lambda e: e["shapes"]["probe"].update(probe_queries=-1), body, "valid"),
        ("fingerprint changed (stale)", lambda e: e["fingerprint"].update(bogus="x"), must_refuse, "valid"),
        ("weights changed", lambda e: e.update(weights="0" * 16), body, "valid"),
        ("ok is a string", lambda e: e["result"].update(ok="true"), must_refuse, "valid"),
    ]
    for label, mut, code, e in variants:
        cases.append(Case("corrupt-files", "qualification cache %s" % label, e, "py", code=code,
                          setup=forged(mut)))
    # Entries kept as they are by the next store: absurd M in an entry never looked up.
    extra = json.loads(json.dumps(doc))
    for i, m in enumerate([1 << 62, -1, 1.5, 1e300, "x"]):
        ent = {"fingerprint": e0["fingerprint"], "weights": e0["weights"],
               "shapes": {"tokens": {"M": m, "tokens": 1 << 40}}, "result": {"ok": True, "reason": "", "facts": []}}
        ent["checksum"] = cache_checksum(ent)
        extra["entries"][cache_key(ent)] = ent
    cases.append(Case("corrupt-files", "qualification cache unused entries with absurd M", "valid",
                      "py", code=body, setup=forged(None, raw=json.dumps(extra))))
    entry_same_key = json.loads(json.dumps(e0))
    entry_same_key["result"]["facts"] = ["tampered"]
    cases.append(Case("corrupt-files", "qualification cache tampered, old checksum", "valid", "py",
                      code=must_refuse, setup=forged(None, raw=json.dumps(
                          {"format": doc["format"], "version": 1, "entries": {key0: entry_same_key}}))))
    for label, raw in [("not JSON", "{"), ("a list", "[]"), ("version 2", json.dumps(dict(doc, version=2))),
                       ("deep", "[" * 100000 + "]" * 100000), ("huge number", '{"format": 1e400}'),
                       ("entries a list", json.dumps(dict(doc, entries=[])))]:
        cases.append(Case("corrupt-files", "qualification cache file %s" % label, "valid", "py",
                          code=must_refuse, setup=forged(None, raw=raw)))
    cases.append(Case("corrupt-files", "qualification cache file is a folder", "valid", "py", code=body,
                      setup=lambda c, cwd, h: os.makedirs(os.path.join(h, "cache", "qualification.json"))))
    cases.append(Case("corrupt-files", "qualification cache file is a FIFO", "valid", "py", code=body,
                      setup=lambda c, cwd, h: (os.makedirs(os.path.join(h, "cache")),
                                               os.mkfifo(os.path.join(h, "cache", "qualification.json")))))
    return cases


def python_cases(ctx):
    cases = []
    fam = "python-api"

    def py(name, expect, code, names=None):
        cases.append(Case(fam, name, expect, "py", code=code, names=names))

    # Engine(...)
    for label, args, e, names in [
        ("checkpoint None", "None", "invalid", ["checkpoint"]),
        ("checkpoint missing", "'nope.json'", "invalid", ["nope.json"]),
        ("checkpoint empty", "''", "invalid", ["checkpoint"]),
        ("checkpoint a folder", "'@FX'", "invalid", ["@FX"]),
        ("checkpoint int", "5", "invalid", ["checkpoint", "5"]),
        ("checkpoint bytes", "b'x.json'", "any", None),
        ("path bogus", "TINY, path='bogus', device='cpu', cache_dir=CACHE", "invalid", ["bogus"]),
        ("path None", "TINY, path=None, device='cpu', cache_dir=CACHE", "invalid", ["path"]),
        ("device tpu", "TINY, device='tpu', cache_dir=CACHE", "invalid", ["device", "tpu"]),
        ("device cuda", "TINY, device='cuda', cache_dir=CACHE", "invalid", ["cuda", "GPU", "device"]),
        ("device_index -1", "TINY, device='cpu', device_index=-1, cache_dir=CACHE", "invalid", ["device_index"]),
        ("device_index 2^40", "TINY, device='cpu', device_index=2**40, cache_dir=CACHE", "invalid", ["device_index"]),
        ("max_device_memory_gib -1", "TINY, device='cpu', max_device_memory_gib=-1, cache_dir=CACHE", "invalid", ["max_device_memory"]),
        ("max_device_memory_gib nan", "TINY, device='cpu', max_device_memory_gib=float('nan'), cache_dir=CACHE", "invalid", ["max_device_memory"]),
        ("max_device_memory_gib inf", "TINY, device='cpu', max_device_memory_gib=float('inf'), cache_dir=CACHE", "any", None),
        ("max_device_memory_gib '1'", "TINY, device='cpu', max_device_memory_gib='1', cache_dir=CACHE", "invalid", ["max_device_memory"]),
        ("qualify_m [0]", "TINY, device='cpu', qualify_m=[0], cache_dir=CACHE", "invalid", ["qualify_m", "M"]),
        ("qualify_m [-1]", "TINY, device='cpu', qualify_m=[-1], cache_dir=CACHE", "invalid", ["qualify_m", "M"]),
        ("qualify_m [2^40]", "TINY, device='cpu', qualify_m=[2**40], cache_dir=CACHE", "invalid", ["qualify_m", "M"]),
        ("qualify_m [2.7]", "TINY, device='cpu', qualify_m=[2.7], cache_dir=CACHE", "invalid", ["qualify_m", "M"]),
        ("qualify_m 'abc'", "TINY, device='cpu', qualify_m='abc', cache_dir=CACHE", "invalid", ["qualify_m"]),
        ("log not callable", "TINY, device='cpu', log=5, cache_dir=CACHE", "invalid", ["log"]),
        ("cache_dir a file", "TINY, device='cpu', cache_dir=TINY", "valid", None),
        ("persist_qualification 'no'", "TINY, device='cpu', persist_qualification='no', cache_dir=CACHE", "invalid", ["persist_qualification"]),
        ("unknown kwarg", "TINY, device='cpu', bogus=1", "invalid", ["bogus"]),
    ]:
        py("Engine(%s)" % label, e, "s3d.Engine(%s)" % args, names)
    py("from_state_dict config a list", "invalid",
       "s3d.Engine.from_state_dict([], {}, device='cpu', cache_dir=CACHE)", ["config"])
    py("from_state_dict config JSON list text", "invalid",
       "s3d.Engine.from_state_dict('[]', {}, device='cpu', cache_dir=CACHE)", ["config"])
    py("from_state_dict state_dict a list", "invalid",
       "s3d.Engine.from_state_dict(json.load(open(TINY)), [1, 2], device='cpu', cache_dir=CACHE)", ["state_dict"])
    py("from_state_dict values lists", "invalid",
       "s3d.Engine.from_state_dict(json.load(open(TINY)), {'input_layer.weight': [1.0]}, device='cpu', cache_dir=CACHE)",
       ["input_layer.weight"])
    py("from_state_dict unknown option", "invalid",
       "s3d.Engine.from_state_dict(json.load(open(TINY)), {}, device='cpu', bogus=1)", ["bogus"])

    # sample() with hostile arrays; each case builds a tiny engine and a 20-token request.
    pre = "e = eng()\nc, cond = req((20,))\nn = noise_for(c)\n"
    sample_variants = [
        ("baseline seed", "e.sample(c, cond, seed=1, sampler={'steps': 2})", "valid", None),
        ("baseline noise", "e.sample(c, cond, noise=n, sampler={'steps': 2})", "valid", None),
        ("coords int64", "e.sample(c.astype(np.int64), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords float32", "e.sample(c.astype(np.float32), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords uint32", "e.sample(c.astype(np.uint32), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords list", "e.sample(c.tolist(), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords non-contiguous", "e.sample(np.asfortranarray(c), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords strided view", "cc = np.zeros((40, 4), np.int32); cc[::2] = c\ne.sample(cc[::2], cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords zero rows", "e.sample(c[:0], cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords [N,3]", "e.sample(np.ascontiguousarray(c[:, :3]), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords 3-d", "e.sample(c.reshape(20, 2, 2), cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords past the model grid", "c[0, 1] = 64\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "any", None),
        ("coords 65535", "c[0, 1] = 65535\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "any", None),
        ("coords 65536", "c[0, 1] = 65536\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords 2^31-1", "c[0, 1] = 2**31 - 1\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords negative", "c[0, 2] = -1\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["coords"]),
        ("coords batch -1", "c[0, 0] = -1\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["coords", "batch"]),
        ("coords batch 1 only", "c[:, 0] = 1\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["coords", "batch"]),
        ("coords wrong batch order", "c2, cond2 = req((10, 10))\nc2[:, 0] = c2[::-1, 0]\ne.sample(c2, cond2, seed=1, sampler={'steps': 2})", "invalid", ["coords", "batch"]),
        ("coords duplicate rows", "c[1] = c[0]\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "any", None),
        ("cond float64", "e.sample(c, cond.astype(np.float64), seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond float16", "e.sample(c, cond.astype(np.float16), seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond int32", "e.sample(c, cond.astype(np.int32), seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond 2-d", "e.sample(c, cond[0], seed=1, sampler={'steps': 2})", "any", None),
        ("cond 4-d", "e.sample(c, cond[None], seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond wrong channels", "e.sample(c, np.ascontiguousarray(cond[:, :, :63]), seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond zero tokens", "e.sample(c, cond[:, :0], seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond batch 2", "e.sample(c, np.concatenate([cond, cond]), seed=1, sampler={'steps': 2})", "invalid", ["cond", "batch"]),
        ("cond batch 0", "e.sample(c, cond[:0], seed=1, sampler={'steps': 2})", "invalid", ["cond", "batch"]),
        ("cond non-contiguous", "e.sample(c, np.swapaxes(np.ascontiguousarray(np.swapaxes(cond, 1, 2)), 1, 2), seed=1, sampler={'steps': 2})", "invalid", ["cond"]),
        ("cond NaN", "cond[0, 0, 0] = np.nan\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["cond", "nan", "finite"]),
        ("cond Inf", "cond[0, 1, 0] = np.inf\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "invalid", ["cond", "inf", "finite"]),
        ("cond 1e38", "cond[:] = 1e38\ne.sample(c, cond, seed=1, sampler={'steps': 2})", "any", None),
        ("cond None", "e.sample(c, None, seed=1)", "invalid", ["cond"]),
        ("noise NaN", "n[0, 0] = np.nan\ne.sample(c, cond, noise=n, sampler={'steps': 2})", "invalid", ["noise", "nan", "finite"]),
        ("noise Inf", "n[3, 0] = -np.inf\ne.sample(c, cond, noise=n, sampler={'steps': 2})", "invalid", ["noise", "inf", "finite"]),
        ("noise float64", "e.sample(c, cond, noise=n.astype(np.float64), sampler={'steps': 2})", "invalid", ["noise"]),
        ("noise wrong rows", "e.sample(c, cond, noise=n[:19], sampler={'steps': 2})", "invalid", ["noise"]),
        ("noise wrong channels", "e.sample(c, cond, noise=np.ascontiguousarray(n[:, :31]), sampler={'steps': 2})", "invalid", ["noise"]),
        ("noise non-contiguous", "e.sample(c, cond, noise=np.asfortranarray(n), sampler={'steps': 2})", "invalid", ["noise"]),
        ("noise and seed", "e.sample(c, cond, noise=n, seed=1)", "invalid", ["noise", "seed"]),
        ("neither noise nor seed", "e.sample(c, cond)", "invalid", ["noise", "seed"]),
        ("concat_cond on a shape model", "e.sample(c, cond, seed=1, concat_cond=n, sampler={'steps': 2})", "invalid", ["concat_cond"]),
        ("steps 2.7", "e.sample(c, cond, seed=1, sampler={'steps': 2.7})", "invalid", ["steps"]),
        ("steps '3'", "e.sample(c, cond, seed=1, sampler={'steps': '3'})", "invalid", ["steps"]),
        ("steps 2^40", "e.sample(c, cond, seed=1, sampler={'steps': 2**40})", "invalid", ["steps"]),
        ("steps 0", "e.sample(c, cond, seed=1, sampler={'steps': 0})", "invalid", ["steps"]),
        ("steps -1", "e.sample(c, cond, seed=1, sampler={'steps': -1})", "invalid", ["steps"]),
        ("steps True", "e.sample(c, cond, seed=1, sampler={'steps': True})", "invalid", ["steps"]),
        ("steps None", "e.sample(c, cond, seed=1, sampler={'steps': None})", "invalid", ["steps"]),
        ("steps 10001", "e.sample(c, cond, seed=1, sampler={'steps': 10001})", "invalid", ["steps"]),
        ("rescale_t nan", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'rescale_t': float('nan')})", "invalid", ["rescale_t"]),
        ("guidance inf", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'guidance': float('inf')})", "invalid", ["guidance"]),
        ("guidance_interval reversed", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'guidance_interval': (1.0, 0.0)})", "invalid", ["interval"]),
        ("guidance_interval 3 values", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'guidance_interval': (0.0, 0.5, 1.0)})", "invalid", ["interval"]),
        ("guidance_rescale 2", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'guidance_rescale': 2.0})", "invalid", ["rescale"]),
        ("sigma_min -1", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'sigma_min': -1.0})", "invalid", ["sigma_min"]),
        ("sigma_min nan", "e.sample(c, cond, seed=1, sampler={'steps': 2, 'sigma_min': float('nan')})", "invalid", ["sigma_min"]),
        ("sampler unknown preset", "e.sample(c, cond, seed=1, sampler='bogus')", "invalid", ["sampler", "bogus"]),
        ("sampler unknown key", "e.sample(c, cond, seed=1, sampler={'stepz': 2})", "invalid", ["stepz"]),
        ("sampler int", "e.sample(c, cond, seed=1, sampler=5)", "invalid", ["sampler"]),
        ("SamplerSettings steps 2.7", "e.sample(c, cond, seed=1, sampler=s3d.SamplerSettings(steps=2.7))", "invalid", ["steps"]),
        ("seed 1.5", "e.sample(c, cond, seed=1.5, sampler={'steps': 2})", "invalid", ["seed"]),
        ("seed -1", "e.sample(c, cond, seed=-1, sampler={'steps': 2})", "invalid", ["seed"]),
        ("seed 2^64", "e.sample(c, cond, seed=2**64, sampler={'steps': 2})", "invalid", ["seed"]),
        ("seed 2^64-1", "e.sample(c, cond, seed=2**64 - 1, sampler={'steps': 2})", "valid", None),
        ("seed '3'", "e.sample(c, cond, seed='3', sampler={'steps': 2})", "invalid", ["seed"]),
        ("seed True", "e.sample(c, cond, seed=True, sampler={'steps': 2})", "invalid", ["seed"]),
        ("seed np.int64", "e.sample(c, cond, seed=np.int64(3), sampler={'steps': 2})", "valid", None),
        ("path bogus", "e.sample(c, cond, seed=1, sampler={'steps': 2}, path='bogus')", "invalid", ["bogus"]),
        ("path pure_eager", "e.sample(c, cond, seed=1, sampler={'steps': 2}, path='pure_eager')", "valid", None),
        ("out wrong shape", "e.sample(c, cond, seed=1, sampler={'steps': 2}, out=np.empty((19, 32), np.float32))", "invalid", ["out"]),
        ("out float64", "e.sample(c, cond, seed=1, sampler={'steps': 2}, out=np.empty((20, 32), np.float64))", "invalid", ["out"]),
        ("out read-only", "o = np.empty((20, 32), np.float32); o.flags.writeable = False\ne.sample(c, cond, seed=1, sampler={'steps': 2}, out=o)", "invalid", ["out"]),
        ("out aliases noise", "e.sample(c, cond, noise=n, sampler={'steps': 2}, out=n)", "any", None),
        ("out non-contiguous", "o = np.empty((32, 20), np.float32).T\ne.sample(c, cond, seed=1, sampler={'steps': 2}, out=o)", "invalid", ["out"]),
        ("stream bogus", "e.sample(c, cond, seed=1, sampler={'steps': 2}, stream='x')", "invalid", ["stream"]),
        ("progress weird", "e.sample(c, cond, seed=1, sampler={'steps': 2}, progress=5)", "any", None),
        ("2^22 rows duplicated coords", "cc = np.zeros((1 << 22, 4), np.int32)\ncc[:, 1] = np.arange(1 << 22) % 64\ne.sample(cc, cond, seed=1, sampler={'steps': 1})", "invalid", ["coords"]),
        ("2^22 rows noise for 20 coords", "e.sample(c, cond, noise=np.zeros((1 << 22, 32), np.float32), sampler={'steps': 1})", "invalid", ["noise"]),
        ("2^22 rows out of grid", "cc = np.full((1 << 22, 4), 70000, np.int32); cc[:, 0] = 0\ne.sample(cc, cond, seed=1, sampler={'steps': 1})", "invalid", ["coords"]),
        ("coords SparseTensor-like without coords", "class S: feats = n\ne.sample(None, cond, noise=S(), sampler={'steps': 2})", "invalid", ["coords"]),
    ]
    for label, code, e, names in sample_variants:
        py("sample %s" % label, e, pre + code, names)
        if label in ("coords 65536", "coords negative", "coords wrong batch order", "cond NaN",
                     "noise NaN", "coords batch -1", "coords 65535", "coords duplicate rows"):
            py("sample %s pure_eager" % label, e,
               pre.replace("eng()", "eng(path='pure_eager')") + code, names)
    # forward()
    fpre = pre + "t = np.full((1,), 500.0, np.float32)\n"
    for label, code, e, names in [
        ("baseline", "e.forward(n, t, cond, coords=c)", "valid", None),
        ("t NaN", "e.forward(n, np.array([np.nan], np.float32), cond, coords=c)", "invalid", ["t"]),
        ("t Inf", "e.forward(n, float('inf'), cond, coords=c)", "invalid", ["t"]),
        ("t -1", "e.forward(n, -1.0, cond, coords=c)", "any", None),
        ("t 2 values for batch 1", "e.forward(n, np.array([1.0, 2.0], np.float32), cond, coords=c)", "invalid", ["t"]),
        ("t float64", "e.forward(n, np.array([500.0]), cond, coords=c)", "invalid", ["t"]),
        ("t string", "e.forward(n, '500', cond, coords=c)", "invalid", ["t"]),
        ("t zero-size", "e.forward(n, np.zeros((0,), np.float32), cond, coords=c)", "invalid", ["t"]),
        ("x NaN", "n[0, 0] = np.nan\ne.forward(n, t, cond, coords=c)", "invalid", ["x", "nan", "finite"]),
        ("x Inf", "n[0, 0] = np.inf\ne.forward(n, t, cond, coords=c)", "invalid", ["x", "inf", "finite"]),
        ("x int32", "e.forward(n.astype(np.int32), t, cond, coords=c)", "invalid", ["x"]),
        ("x zero rows", "e.forward(n[:0], t, cond, coords=c[:0])", "invalid", ["x", "coords"]),
        ("x non-contiguous", "e.forward(np.asfortranarray(n), t, cond, coords=c)", "invalid", ["x"]),
        ("x rows mismatch coords", "e.forward(n[:10], t, cond, coords=c)", "invalid", ["x", "coords"]),
        ("no coords", "e.forward(n, t, cond)", "invalid", ["coords"]),
        ("coords 65536", "c[0, 1] = 65536\ne.forward(n, t, cond, coords=c)", "invalid", ["coords"]),
        ("cond NaN", "cond[0, 0, 0] = np.nan\ne.forward(n, t, cond, coords=c)", "invalid", ["cond"]),
        ("x a dict", "e.forward({'feats': n}, t, cond, coords=c)", "invalid", ["x"]),
    ]:
        py("forward %s" % label, e, fpre + code, names)
    # warm_up, fits, timesteps, draw_noise
    for label, code, e, names in [
        ("warm_up baseline", "e.warm_up([20], 9)", "valid", None),
        ("warm_up [-1]", "e.warm_up([-1], 9)", "invalid", ["tokens"]),
        ("warm_up [0]", "e.warm_up([0], 9)", "invalid", ["tokens"]),
        ("warm_up [2^40]", "e.warm_up([2**40], 9)", "invalid", ["tokens"]),
        ("warm_up [2^63]", "e.warm_up([2**63], 9)", "invalid", ["tokens"]),
        ("warm_up cond_tokens 0", "e.warm_up([20], 0)", "invalid", ["cond_tokens"]),
        ("warm_up cond_tokens -5", "e.warm_up([20], -5)", "invalid", ["cond_tokens"]),
        ("warm_up cond_tokens 2^31", "e.warm_up([20], 2**31)", "invalid", ["cond_tokens"]),
        ("warm_up tokens 2.7", "e.warm_up([2.7], 9)", "invalid", ["tokens"]),
        ("warm_up tokens a string", "e.warm_up('20', 9)", "invalid", ["tokens"]),
        ("warm_up tokens None", "e.warm_up(None, 9)", "invalid", ["tokens"]),
        ("warm_up 2^22 tokens", "e.warm_up([1 << 22], 9)", "any", None),
        ("fits baseline", "r = e.fits(20, 1, 9)\nassert r == '', r", "valid", None),
        ("fits(-1, 1, 37)", "e.fits(-1, 1, 37)", "invalid", ["tokens"]),
        ("fits(0, 1, 37)", "e.fits(0, 1, 37)", "invalid", ["tokens"]),
        ("fits(20, 0, 37)", "e.fits(20, 0, 37)", "invalid", ["batch"]),
        ("fits(20, -1, 37)", "e.fits(20, -1, 37)", "invalid", ["batch"]),
        ("fits(20, 1, -1)", "e.fits(20, 1, -1)", "invalid", ["cond_tokens"]),
        ("fits(2^62, 1, 37)", "e.fits(2**62, 1, 37)", "any", None),
        ("fits(2^64, 1, 37)", "e.fits(2**64, 1, 37)", "invalid", ["tokens"]),
        ("fits(2.7, 1, 37)", "e.fits(2.7, 1, 37)", "invalid", ["tokens"]),
        ("fits(20, 21, 37)", "e.fits(20, 21, 37)", "invalid", ["batch"]),
        ("fits path bogus", "e.fits(20, 1, 9, path='bogus')", "invalid", ["bogus"]),
        ("fits nan", "e.fits(float('nan'), 1, 9)", "invalid", ["tokens"]),
        ("timesteps baseline", "ts = s3d.timesteps('released')\nassert len(ts) == 13", "valid", None),
        ("timesteps steps 0", "s3d.timesteps({'steps': 0})", "invalid", ["steps"]),
        ("timesteps steps 2.7", "ts = s3d.timesteps({'steps': 2.7})", "invalid", ["steps"]),
        ("timesteps steps '3'", "s3d.timesteps({'steps': '3'})", "invalid", ["steps"]),
        ("timesteps steps 2^40", "s3d.timesteps({'steps': 2**40})", "invalid", ["steps"]),
        ("timesteps rescale_t 0", "s3d.timesteps({'steps': 3, 'rescale_t': 0})", "invalid", ["rescale_t"]),
        ("timesteps rescale_t nan", "s3d.timesteps({'steps': 3, 'rescale_t': float('nan')})", "invalid", ["rescale_t"]),
        ("timesteps rescale_t -1", "s3d.timesteps({'steps': 3, 'rescale_t': -1})", "invalid", ["rescale_t"]),
        ("timesteps sampler None", "s3d.timesteps(None)", "any", None),
        ("timesteps steps 10000", "ts = s3d.timesteps({'steps': 10000})", "valid", None),
        ("draw_noise baseline", "a = s3d.draw_noise(1, 4, 8)\nassert a.shape == (4, 8)", "valid", None),
        ("draw_noise rows -1", "s3d.draw_noise(1, -1, 8)", "invalid", ["rows"]),
        ("draw_noise cols 0", "a = s3d.draw_noise(1, 4, 0)\nassert a.size == 0", "any", None),
        ("draw_noise seed -1", "s3d.draw_noise(-1, 4, 8)", "invalid", ["seed"]),
        ("draw_noise seed 1.5", "s3d.draw_noise(1.5, 4, 8)", "invalid", ["seed"]),
        ("draw_noise seed 2^64", "s3d.draw_noise(2**64, 4, 8)", "invalid", ["seed"]),
        ("draw_noise 2^40 x 2^40", "s3d.draw_noise(1, 2**40, 2**40)", "invalid", ["rows", "cols", "size"]),
        ("draw_noise 2^31 x 2", "s3d.draw_noise(1, 2**31, 2)", "invalid", ["rows", "size"]),
        ("draw_noise offset -1", "s3d.draw_noise(1, 4, 8, -1)", "invalid", ["offset"]),
        ("draw_noise offset 2^64-1", "s3d.draw_noise(1, 4, 8, 2**64 - 1)", "invalid", ["offset"]),
        ("draw_noise rows '4'", "s3d.draw_noise(1, '4', 8)", "invalid", ["rows"]),
        ("make_synthetic_checkpoint preset bogus", "s3d.make_synthetic_checkpoint('@CWD/x', preset='bogus')", "invalid", ["bogus"]),
        ("make_synthetic_checkpoint seed -1", "s3d.make_synthetic_checkpoint('@CWD/x', seed=-1)", "invalid", ["seed"]),
        ("make_synthetic_checkpoint dtype f16", "s3d.make_synthetic_checkpoint('@CWD/x', dtype='f16')", "invalid", ["dtype"]),
        ("make_synthetic_checkpoint out /proc", "s3d.make_synthetic_checkpoint('/proc/self/hostile/x')", "invalid", ["/proc"]),
        ("engine_by_id -1", "s3d.engine_by_id(-1)", "invalid", ["-1"]),
        ("engine_by_id 'x'", "s3d.engine_by_id('x')", "invalid", ["x"]),
    ]:
        needs_engine = label.startswith(("warm_up", "fits"))
        py(label, e, (pre if needs_engine else "") + code, names)
    # Re-entrant callbacks and log= (may deadlock: the per-case timeout catches it).
    for label, inner, e in [
        ("counters()", "e.counters()", "valid"),
        ("fits()", "e.fits(20, 1, 9)", "any"),
        ("qualification()", "e.qualification()", "valid"),
        ("reset_counters()", "e.reset_counters()", "any"),
        ("sample()", "e.sample(c, cond, seed=2, sampler={'steps': 1})", "any"),
        ("forward()", "e.forward(n, 500.0, cond, coords=c)", "any"),
        ("offload()", "e.offload()", "any"),
        ("warm_up()", "e.warm_up([11], 9)", "any"),
    ]:
        py("callback calls %s" % label, e, pre + (
            "def cb(step, t, lat):\n    %s\n" % inner) +
            "e.sample(c, cond, seed=1, sampler={'steps': 2}, callback=cb)")
        py("log= calls %s" % label, e,
           "c, cond = req((20,))\nn = noise_for(c)\nholder = {}\n"
           "def lg(line):\n    e = holder.get('e')\n    if e is not None:\n        %s\n" % inner +
           "e = eng(log=lg, persist_qualification=False)\nholder['e'] = e\n"
           "e.sample(c, cond, seed=1, sampler={'steps': 2})\n"
           "e.sample(c, cond, seed=1, sampler={'steps': 2}, path='pure_eager')\n")
    py("callback raises", "invalid", pre + "def cb(s, t, l):\n    raise ValueError('callback says no')\n"
       "e.sample(c, cond, seed=1, sampler={'steps': 2}, callback=cb)", ["callback"])
    py("callback keeps the latent view", "any", pre + "kept = []\ndef cb(s, t, l):\n    kept.append(l)\n"
       "e.sample(c, cond, seed=1, sampler={'steps': 2}, callback=cb)\ndel e\nimport gc; gc.collect()\n"
       "float(np.asarray(kept[0]).sum())")
    py("callback not callable", "invalid", pre + "e.sample(c, cond, seed=1, sampler={'steps': 2}, callback=5)", ["callback"])
    py("two threads sample one engine", "valid", pre +
       "errs = []\ndef w():\n    try:\n        e.sample(c, cond, seed=1, sampler={'steps': 2})\n    except Exception as x:\n        errs.append(x)\n"
       "ts = [threading.Thread(target=w) for _ in range(3)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
       "if errs: raise errs[0]")
    # accelerate() with hostile fake pipelines
    t2pre = ("import sparse3d_engine.trellis2 as t2\ncfg = json.load(open(TINY))\n"
             "def rd(p):\n    import struct\n    f = open(p, 'rb'); n, = struct.unpack('<Q', f.read(8)); h = json.loads(f.read(n)); d = f.read(); out = {}\n"
             "    for k, v in h.items():\n        if k == '__metadata__': continue\n"
             "        a, b = v['data_offsets']; raw = np.frombuffer(d[a:b], np.uint16 if v['dtype'] == 'BF16' else np.float32)\n"
             "        out[k] = ((raw.astype(np.uint32) << 16).view(np.float32) if v['dtype'] == 'BF16' else raw).reshape(v['shape']).copy()\n"
             "    return out\nSD = rd(TINY[:-5] + '.safetensors')\n"
             "ARGS = ('resolution', 'in_channels', 'model_channels', 'cond_channels', 'out_channels', 'num_blocks', 'num_heads', 'mlp_ratio', 'pe_mode', 'share_mod', 'qk_rms_norm', 'qk_rms_norm_cross')\n"
             "class Orig:\n    def __init__(self, config, sd):\n        for a in ARGS: setattr(self, a, config['args'][a])\n"
             "        self.rope_freq = config['args']['rope_freq']; self.dtype = 'torch.bfloat16'; self._s = sd\n"
             "        self.calls = 0\n"
             "    def state_dict(self): return self._s\n    def __call__(self, x, t, cond, **kw):\n        self.calls += 1\n        return x\n"
             "class Smp:\n    def sample(self, model, noise, cond, neg_cond, steps=50, **kw): return model(noise, np.zeros(1, np.float32), cond)\n"
             "class P:\n    def __init__(self, m):\n        self.models = {'shape_slat_flow_model_512': m}\n        self.shape_slat_sampler = Smp()\n        self.tex_slat_sampler = Smp()\n"
             "def acc(p, **kw):\n    kw.setdefault('device', 'cpu'); kw.setdefault('cache_dir', CACHE)\n    return t2.accelerate(p, **kw)\n"
             "class ST:\n    def __init__(s, f, c): s.feats, s.coords = f, c\n    def replace(s, f): return ST(f, s.coords)\n"
             "def call(p):\n    m = p.models['shape_slat_flow_model_512']\n    c, cond = req((20,))\n"
             "    return m(ST(noise_for(c), c), np.full(1, 500.0, np.float32), cond)\n"
             "def left_on_pytorch(a, p, orig):\n    # skipped at accelerate(), or its first call fell back to the original module\n"
             "    if 'shape_slat_flow_model_512' in a.skipped:\n        return\n    call(p)\n"
             "    if orig.calls == 0:\n        raise Wrong('a hostile module ran in the engine: ' + a.report().replace(chr(10), ' '))\n")
    for label, code, e, names in [
        ("baseline", "m = Orig(cfg, SD); p = P(m); a = acc(p)\ncall(p)\nassert 'shape_slat_flow_model_512' not in a.skipped and m.calls == 0, a.report()", "valid", None),
        ("pipeline None", "acc(None)", "invalid", ["pipeline"]),
        ("pipeline without models", "acc(object())", "invalid", ["models", "pipeline"]),
        ("models a list", "p = P(Orig(cfg, SD)); p.models = [1, 2]\nacc(p)", "invalid", ["models"]),
        ("module without state_dict", "class M: pass\nm = Orig(cfg, SD); p = P(m)\np.models['shape_slat_flow_model_512'] = type('X', (), {a: getattr(m, a) for a in ARGS})()\na = acc(p)", "any", None),
        ("state_dict returns a list", "m = Orig(cfg, SD); m.state_dict = lambda: [1, 2]\np = P(m)\nleft_on_pytorch(acc(p), p, m)", "any", None),
        ("state_dict raises", "m = Orig(cfg, SD)\ndef bad(): raise KeyError('boom')\nm.state_dict = bad\nacc(P(m))", "any", None),
        ("state_dict values are lists", "m = Orig(cfg, {k: v.tolist() for k, v in SD.items()}); p = P(m)\nleft_on_pytorch(acc(p), p, m)", "any", None),
        ("state_dict missing a tensor", "sd = dict(SD); sd.pop(next(iter(sd)))\nm = Orig(cfg, sd); p = P(m)\nleft_on_pytorch(acc(p), p, m)", "any", None),
        ("state_dict NaN weight", "sd = dict(SD); k = next(iter(sd)); sd[k] = sd[k].copy(); sd[k].flat[0] = np.nan\nm = Orig(cfg, sd); p = P(m)\nleft_on_pytorch(acc(p), p, m)", "any", None),
        ("module attribute wrong type", "m = Orig(cfg, SD); m.num_blocks = 'two'\np = P(m)\nleft_on_pytorch(acc(p), p, m)", "any", None),
        ("checkpoints a list", "p = P(Orig(cfg, SD)); acc(p, checkpoints=[1]); call(p)", "invalid", ["checkpoints"]),
        ("checkpoint json is a list", "import os\nos.makedirs('@CWD/pd/ckpts')\nopen('@CWD/pd/ckpts/shape_slat_flow_model_512.json', 'w').write('[]')\n"
         "import shutil; shutil.copy(TINY[:-5] + '.safetensors', '@CWD/pd/ckpts/shape_slat_flow_model_512.safetensors')\n"
         "m = Orig(cfg, SD); p = P(m)\nleft_on_pytorch(acc(p, pipeline_dir='@CWD/pd'), p, m)", "any", None),
        ("sampler without .sample", "p = P(Orig(cfg, SD)); p.shape_slat_sampler = object()\na = acc(p)", "any", None),
        ("sampler is None", "p = P(Orig(cfg, SD)); p.shape_slat_sampler = None\na = acc(p)", "any", None),
        ("list feats through the model", "p = P(Orig(cfg, SD)); a = acc(p)\nm = p.models['shape_slat_flow_model_512']\n"
         "class ST:\n    def __init__(s, f, c): s.feats, s.coords = f, c\n    def replace(s, f): return ST(f, s.coords)\n"
         "c, cond = req((20,))\nm(ST(noise_for(c).tolist(), c), np.full(1, 500.0, np.float32), cond)", "any", None),
        ("accelerate twice", "p = P(Orig(cfg, SD)); acc(p); acc(p)", "any", None),
        ("unknown engine option", "p = P(Orig(cfg, SD)); acc(p, bogus=1); call(p)", "invalid", ["bogus"]),
        ("warm_up='yes'", "acc(P(Orig(cfg, SD)), warm_up='yes')", "invalid", ["warm_up"]),
    ]:
        py("accelerate %s" % label, e, t2pre + code, names)
    return cases


def mode_cases(ctx):
    cases = []
    CK = os.path.join(ctx.fx, "ck", "tiny.json")
    GOLD = os.path.join(ctx.fx, "gold", "manifest.json")
    for label, argv in [
        ("make-checkpoint", ["make-checkpoint", "--preset", "tiny", "--out", "ck/t"]),
        ("make-checkpoint f32", ["make-checkpoint", "--preset", "tiny", "--dtype", "f32", "--out", "t"]),
        ("make-payloads", ["make-payloads", "--set", "small", "--tokens", "5,6", "--out", "pay"]),
        ("make-payloads dense-small", ["make-payloads", "--set", "dense-small", "--out", "pay"]),
        ("run outputs", ["run", "--checkpoint", CK, "--manifest", GOLD, "--asset", "a01-torus-61",
                         "--device", "cpu", "--steps", "1", "--out", "out"]),
        ("run outputs --dump-first-forward", ["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                                              "a00-sphere-1", "--device", "cpu", "--steps", "1",
                                              "--dump-first-forward", "--out", "out"]),
        ("run cache in --cache-dir", ["run", "--checkpoint", CK, "--manifest", GOLD, "--asset",
                                      "a00-sphere-1", "--device", "cpu", "--steps", "1", "--out", "out",
                                      "--cache-dir", "qc"]),
        ("bench-report", ["bench-report", "--result", ctx.bench_json, "--out", "rep"]),
        ("bench --replot", ["bench", "--replot", ctx.bench_json, "--md", "r.md"]),
    ]:
        cases.append(Case("file-modes", label, "valid", "cli", argv=argv, check_modes=True))
    cases.append(Case("file-modes", "python make_synthetic_checkpoint", "valid", "py",
                      code="s3d.make_synthetic_checkpoint('@CWD/ck/x')", check_modes=True))
    cases.append(Case("file-modes", "python qualification cache", "valid", "py",
                      code="e = eng()\nc, cond = req((20,))\ne.sample(c, cond, seed=1, sampler={'steps': 1})",
                      check_modes=True))
    return cases


# ---- Report ------------------------------------------------------------------------------------

def summarize(results, label, build, seconds):
    fams = []
    for r in results:
        if r["family"] not in fams:
            fams.append(r["family"])
    used = [c for c in CLASSES if any(r["outcome"] == c for r in results)]
    lines = ["# Hostile-input run: %s" % label, "",
             "%d cases, build `%s`, %.0f s. Correct outcomes: refused (an invalid input, one clear "
             "error), accepted (a valid input that ran). Made by tests/hostile/hostile_run.py; the classes "
             "are described in its docstring and in docs/RELIABILITY.md." % (len(results), build, seconds), "",
             "| family | cases | " + " | ".join(used) + " | slow_refusal | large_allocation |",
             "|---" * (len(used) + 4) + "|"]
    rows = fams + ["all"]
    for f in rows:
        rs = [r for r in results if f == "all" or r["family"] == f]
        cells = [str(sum(r["outcome"] == c for r in rs)) for c in used]
        fl = [str(sum(x in r["flags"] for r in rs)) for x in ("slow_refusal", "large_allocation")]
        lines.append("| %s | %d | %s | %s |" % (f if f != "all" else "**all**", len(rs),
                                                 " | ".join(cells), " | ".join(fl)))
    lines += ["", "## Cases whose outcome is not correct, or flagged", "",
              "| family | case | expected | outcome | flags | exit | s | RSS MiB | message |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["outcome"] in CORRECT and not r["flags"]:
            continue
        m = (r["stderr"] + (" [" + r["detail"] + "]" if r.get("detail") else "")).replace("|", "\\|")
        lines.append("| %s | %s | %s | %s | %s | %s | %.2f | %.0f | %s |" % (
            r["family"], r["name"].replace("|", "\\|").replace("\n", "\\n"), r["expectation"], r["outcome"],
            ",".join(r["flags"]), r["exit_code"], r["seconds"], r["rss_mib"], m[:240]))
    return "\n".join(lines) + "\n"


def compare(path_a, path_b):
    """Two runs' command-line and cache-folder cases side by side (e.g. --program sparse3d
    against --program python): which cases ended differently (class or exit code), and which
    failed with another message once the program's name, the temporary folders and the
    hidden temporaries' random names are set aside."""
    import gzip
    runs = [json.load(gzip.open(p, "rt") if p.endswith(".gz") else open(p)) for p in (path_a, path_b)]
    by_name = [{c["name"]: c for c in r["cases"]} for r in runs]
    tmp = re.compile(r"/tmp/hostile-[A-Za-z0-9_]+|\.[A-Za-z0-9_-]+\.[A-Za-z0-9]{6}\b")

    def norm(text):
        text = text.replace("sparse3d-engine: error:", "sparse3d: error:")
        text = text.replace("(see python -m sparse3d_engine --help)", "(see sparse3d --help)")
        return tmp.sub("<tmp>", text)
    lines = ["| case | %s | %s |" % (runs[0]["program"], runs[1]["program"]), "|---|---|---|"]
    n = same = 0
    for name, a in by_name[0].items():
        b = by_name[1].get(name)
        if b is None or a["family"] == "python-api":
            continue
        n += 1
        if (a["outcome"], a["exit_code"]) != (b["outcome"], b["exit_code"]):
            lines.append("| %s | %s, exit %s | %s, exit %s |" % (name, a["outcome"], a["exit_code"],
                                                                b["outcome"], b["exit_code"]))
        elif norm(a["stderr"])[:280] != norm(b["stderr"])[:280]:   # (kept to 300 characters)
            lines.append("| %s | %s | %s |" % (name, a["stderr"][:120], b["stderr"][:120]))
        else:
            same += 1
    print("%d cases run by both programs (the Python API's cases left out): %d ended alike, with "
          "the same message; %d did not:\n" % (n, same, n - same))
    print("\n".join(lines))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        return compare(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="build folder (bin/sparse3d, python/)")
    ap.add_argument("--label", default="run", help="e.g. before / after")
    ap.add_argument("--out", default=None, help="output stem (default bench/results/hostile-inputs/DATE-LABEL)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="", help="only cases whose family or name holds this")
    ap.add_argument("--timeout", type=float, default=20.0, help="per-case seconds")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--note", default="", help="a line on what the build is, kept in the outputs")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--program", choices=("sparse3d", "python"), default="sparse3d",
                    help="what runs the command-line cases: the executable, or python -m "
                         "sparse3d_engine")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="hostile-", dir="/tmp")
    ctx = Ctx(args.build, root, args.program)
    if not os.path.exists(ctx.cli):
        raise SystemExit("no %s: build first (--build DIR)" % ctx.cli)
    t0 = time.monotonic()
    make_fixtures(ctx)
    if args.program == "python":   # the interpreter's start-up, the slowest of three
        env = dict(os.environ, PYTHONPATH=ctx.pypath)
        ctx.startup_s = max(run_quiet(ctx.command + ["--version"], env=env) and
                            _seconds(ctx.command + ["--version"], env) for _ in range(3))
    cases = (cli_cases(ctx) + out_cases(ctx) + signal_cases(ctx) + corrupt_cases(ctx) +
             cache_cases(ctx) + cache_folder_cases(ctx) + python_cases(ctx) + mode_cases(ctx))
    seen = {}
    for c in cases:   # unique names
        if c.name in seen:
            seen[c.name] += 1
            c.name = "%s #%d" % (c.name, seen[c.name])
        else:
            seen[c.name] = 1
    if args.filter:
        cases = [c for c in cases if args.filter in c.name or args.filter in c.family]
    if args.list:
        for c in cases:
            print("%-14s %-9s %s" % (c.family, c.expect, c.name))
        print(len(cases), "cases")
        return
    print("fixtures in %s; cache key/checksum reimplementation %s; %d cases, %d jobs" % (
        root, "matches" if ctx.cache_ok else "DOES NOT match (forged cache cases are plain corruptions)",
        len(cases), args.jobs), flush=True)
    results = [None] * len(cases)
    done = [0]
    lock = threading.Lock()

    def one(i):
        r = run_case(ctx, cases[i], i, args.timeout)
        results[i] = r
        with lock:
            done[0] += 1
            if r["outcome"] not in CORRECT or done[0] % 50 == 0:
                print("[%d/%d] %-16s %-14s %s %s" % (done[0], len(cases), r["outcome"], r["family"],
                                                   r["name"][:70], r["stderr"][:90]), flush=True)
        shutil.rmtree(os.path.join(root, "cases", "%04d" % i), ignore_errors=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        list(ex.map(one, range(len(cases))))
    seconds = time.monotonic() - t0
    # Its own folder: a case table, not a timing result (bench/results/*.json are bench runs).
    stem = args.out or os.path.join(REPO, "bench", "results", "hostile-inputs", "%s-%s" % (
        datetime.date.today().isoformat(), args.label))
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    doc = {"label": args.label, "build": os.path.abspath(args.build), "note": args.note,
           "program": " ".join(ctx.command), "startup_s": round(ctx.startup_s, 3),
           "seconds": round(seconds, 1),
           "timeout_s": args.timeout, "jobs": args.jobs, "filter": args.filter,
           "cache_checksum_reimplementation_matches": ctx.cache_ok, "cases": results}
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    md = summarize(results, args.label, os.path.abspath(args.build), seconds)
    if args.note:
        md = md.replace("\n\n", "\n\n%s\n\n" % args.note, 1)
    with open(stem + ".md", "w") as f:
        f.write(md)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print("wrote %s.json and %s.md" % (stem, stem))
    print(md.split("\n## ")[0])


if __name__ == "__main__":
    main()
