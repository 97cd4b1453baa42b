"""`python -m sparse3d_engine` and the `sparse3d-engine` console script, in a subprocess with
only the package on PYTHONPATH (no build tree, no `sparse3d` executable). Both run the C++
command line through the native module; where the executable is at hand (SPARSE3D_CLI) the
two are compared case by case: the same exit code, the same error line (after the program's
name), the same files."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY as _TINY, make_request, read_safetensors, write_safetensors

TINY = os.path.abspath(_TINY)   # the commands run in their own folders

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(s3d.__file__)))
CLI = os.environ.get("SPARSE3D_CLI")


def _arg(a):
    return os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a)


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE3D_CLI", "PYTHONPATH")}
    env["PYTHONPATH"] = PACKAGE_ROOT
    return env


def module(*args, cwd=None, timeout=600, **kwargs):
    """python -m sparse3d_engine ARGS with the package alone on the path."""
    return subprocess.run([sys.executable, "-m", "sparse3d_engine", *map(_arg, args)],
                          capture_output=True, text=True, errors="backslashreplace",
                          timeout=timeout, cwd=cwd, env=_env(), **kwargs)


def executable(*args, cwd=None, timeout=600):
    return subprocess.run([CLI, *map(_arg, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_info_and_version(tmp_path):
    r = module("--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == f"sparse3d {s3d.__version__}\n", r
    r = module("info", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert isinstance(info["has_gpu"], bool)
    assert set(info) == set(json.loads(s3d._native.environment_json())) | {"libraries"}
    # The CUDA libraries the process loaded (the module's own, through the package's loader;
    # the CUDA 13 wheel links the CUDA runtime statically, so no libcudart there).
    names = {lib["name"] for lib in info["libraries"]}
    assert {"libcublasLt", "libcudnn"} <= names, info["libraries"]
    assert all(os.path.isabs(lib["path"]) for lib in info["libraries"]), info["libraries"]
    r = module("--help", cwd=tmp_path)
    assert r.returncode == 0 and "Usage: python -m sparse3d_engine [OPTIONS]" in r.stdout
    for command in ("run", "export-glb", "make-checkpoint", "make-payloads", "bench", "paths"):
        assert f"\n  {command} " in r.stdout, (command, r.stdout)


def test_the_console_script_names_itself(tmp_path):
    # What pip installs as `sparse3d-engine`: a script calling main() with argv[0] its path.
    script = tmp_path / "sparse3d-engine"
    script.write_text("import sys\nfrom sparse3d_engine.__main__ import main\n"
                      "sys.exit(main())\n")
    r = subprocess.run([sys.executable, str(script), "runn"], capture_output=True, text=True,
                       env=_env())
    assert r.returncode == 2, r
    assert r.stderr.startswith("sparse3d-engine: error: ") and "did you mean" in r.stderr, r
    assert "(see sparse3d-engine --help)" in r.stderr, r.stderr


# Arguments each command line must refuse with one line: (args, exit code, what the line says).
REFUSALS = [
    (("runn",), 2, 'did you mean "run"'),
    (("run", "--checkpoint", TINY, "--stepz", "3"), 2, "did you mean --steps"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--seed", "-1"), 2, "--seed"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--cond-tokens", "-1"), 2, "--cond-tokens"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--cond-tokens", "10000000000"), 2,
     "--cond-tokens"),
    (("run", "--checkpoint", TINY, "--tokens", "1e3"), 2, "--tokens"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--steps", "0"), 2, "--steps"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--devices", "0,"), 2, "--devices"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--devices", "0,0"), 2, "--devices"),
    (("run", "--checkpoint", TINY, "--tokens", "5", "--manifest", "m.json"), 2, "exclude"),
    (("run", "--checkpoint", TINY), 2, "--tokens"),
    (("run", "--checkpoint", TINY[:-5] + ".safetensors", "--tokens", "5", "--device", "cpu"),
     1, "is the weights file"),
    (("run", "--checkpoint", "missing.json", "--tokens", "5", "--device", "cpu"), 1,
     "missing.json"),
    (("run", "--checkpoint", TINY, "--tokens", "300000", "--device", "cpu"), 1, "64^3"),
    (("run", "--checkpoint", "a\nb.json", "--tokens", "5"), 1, "a\\x0ab.json"),
    (("runn\x1b[2J",), 2, "runn\\x1b[2J"),
    (("make-checkpoint", "--preset", "huge", "--out", "x"), 1, "unknown model preset 'huge'"),
    (("make-checkpoint", "--preset", "x\x1b[31m", "--out", "m"), 1, "x\\x1b[31m"),
    (("make-checkpoint", "--preset", "tiny"), 2, "--out"),
    (("make-checkpoint", "--preset", "tiny", "--out", "d/"), 1, "names a folder"),
]


@pytest.mark.parametrize("args,code,needle", REFUSALS, ids=[" ".join(a[0][:2]) + f" {i}"
                                                           for i, a in enumerate(REFUSALS)])
def test_refusals_are_one_line_and_the_executables(tmp_path, args, code, needle):
    r = module(*args, cwd=tmp_path, timeout=120)
    assert r.returncode == code and needle in r.stderr, r
    assert r.stderr.startswith("sparse3d-engine: error: ") and r.stderr.count("\n") == 1, r
    assert "\x1b" not in r.stderr and "Traceback" not in r.stderr, r
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())
    if CLI:
        c = executable(*args, cwd=tmp_path, timeout=120)
        assert c.returncode == r.returncode, (c, r)
        assert c.stderr.replace("sparse3d: error:", "sparse3d-engine: error:", 1).replace(
            "(see sparse3d --help)", "(see python -m sparse3d_engine --help)") == r.stderr, \
            (c.stderr, r.stderr)


def test_make_checkpoint_writes_what_the_api_writes(tmp_path):
    r = module("make-checkpoint", "--preset", "tiny", "--seed", 3, "--out",
               tmp_path / "a" / "tiny", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    json_path, st_path = tmp_path / "a" / "tiny.json", tmp_path / "a" / "tiny.safetensors"
    assert json.loads(json_path.read_text())["name"] == "SLatFlowModel"
    c = s3d.make_synthetic_checkpoint(tmp_path / "b" / "tiny", preset="tiny", seed=3)
    assert (tmp_path / "b" / "tiny.safetensors").read_bytes() == st_path.read_bytes()
    assert (tmp_path / "b" / "tiny.json").read_bytes() == json_path.read_bytes()
    assert c["family"] == "SLatFlowModel"


def test_run_a_synthetic_request(tmp_path):
    args = ("run", "--checkpoint", TINY, "--tokens", 50, "--cond-tokens", 7, "--steps", 2,
            "--device", "cpu", "--no-qualification-cache")
    r = module(*args, "--seed", 4, "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[synthetic] 50 tokens" in r.stdout and "fallbacks:" in r.stdout, r.stdout
    got = read_safetensors(tmp_path / "out" / "synthetic.safetensors")
    assert got["latent"].shape == (50, 32) and got["coords"].shape == (50, 4)
    assert np.isfinite(got["latent"]).all() and got["latent"].std() > 0
    # Drawn from the seed: another seed, other voxels and another latent.
    r = module(*args, "--seed", 5, "--out", tmp_path / "five", cwd=tmp_path)
    five = read_safetensors(tmp_path / "five" / "synthetic.safetensors")
    assert r.returncode == 0 and not np.array_equal(five["latent"], got["latent"]), r.stderr
    if CLI:
        c = executable(*args, "--seed", 4, "--out", tmp_path / "cli", cwd=tmp_path)
        assert c.returncode == 0, c.stderr
        assert ((tmp_path / "cli" / "synthetic.safetensors").read_bytes()
                == (tmp_path / "out" / "synthetic.safetensors").read_bytes())


@pytest.mark.parametrize("bf16_cond", [False, True])
def test_run_an_inputs_file_gives_the_apis_latent(tmp_path, bf16_cond):
    coords, cond = make_request([37, 21], 6)
    cond = np.ascontiguousarray(cond[:, :5])
    if bf16_cond:   # values a bf16 holds exactly
        cond = ((cond.view(np.uint32) >> 16) << 16).view(np.float32)
    noise = s3d.draw_noise(8, coords.shape[0], 32)
    path = tmp_path / "req.safetensors"
    write_safetensors(path, {"coords": coords, "cond": cond, "noise": noise},
                      bf16=("cond",) if bf16_cond else ())
    r = module("run", "--checkpoint", TINY, "--inputs", path, "--steps", 3, "--device", "cpu",
               "--no-qualification-cache", "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[req] 58 tokens" in r.stdout, r.stdout
    got = read_safetensors(tmp_path / "out" / "req.safetensors")
    e = s3d.Engine(TINY, device="cpu", persist_qualification=False)
    want = e.sample(coords, cond, noise=noise, sampler=s3d.SamplerSettings(steps=3),
                    progress=False)
    assert np.array_equal(got["latent"], want)
    assert np.array_equal(got["coords"], coords)


def _raw(path, header, data=bytes(32)):
    """A safetensors file with exactly this header (any JSON text) and data."""
    text = header.encode() if isinstance(header, str) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


MALFORMED = {
    "offsets3": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16, 0]}},
                 "data_offsets [0,16,0]"),
    "offsets_str": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": ["0", "16"]}},
                    'data_offsets ["0","16"]'),
    "dtype_list": ({"cond": {"dtype": ["I32"], "shape": [1, 4], "data_offsets": [0, 16]}},
                   "not a string"),
    "shape_bool": ({"cond": {"dtype": "F32", "shape": [True, 4], "data_offsets": [0, 16]}},
                   "has shape [true,4]"),
    "wraps": ({"cond": {"dtype": "F32", "shape": [2 ** 62, 4], "data_offsets": [0, 0]}},
              "does not fit in 64 bits"),
    "overlap": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]},
                 "noise": {"dtype": "F32", "shape": [1, 4], "data_offsets": [8, 24]}},
                "overlaps"),
    "twice": ('{"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]}, '
              '"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]}}',
              "duplicate key 'cond'"),
    "extra": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]},
               "extra": {"dtype": "F32", "shape": [1, 4], "data_offsets": [16, 32]}},
              "unexpected tensor 'extra'"),
    "nocond": ({"coords": {"dtype": "I32", "shape": [2, 4], "data_offsets": [0, 32]}},
               "no 'cond'"),
    "junk": ("{oops", "invalid JSON"),
}


def test_malformed_inputs_are_one_line_errors(tmp_path):
    for name, (header, needle) in MALFORMED.items():
        path = tmp_path / f"{name}.safetensors"
        _raw(path, header)
        r = module("run", "--checkpoint", TINY, "--inputs", path, "--device", "cpu",
                   cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and needle in r.stderr, (name, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (name, r.stderr)
    # A tensor declared at 3 GiB over a sparse file: refused from the header, quickly.
    huge = tmp_path / "huge.safetensors"
    _raw(huge, {"coords": {"dtype": "I32", "shape": [201326592, 4],
                           "data_offsets": [0, 201326592 * 16]}}, b"")
    os.truncate(huge, os.path.getsize(huge) + 201326592 * 16)
    r = module("run", "--checkpoint", TINY, "--inputs", huge, "--device", "cpu", cwd=tmp_path,
               timeout=30)
    assert r.returncode == 1 and "huge.safetensors" in r.stderr, r.stderr
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    r = module("run", "--checkpoint", TINY, "--inputs", fifo, "--device", "cpu", cwd=tmp_path,
               timeout=60)
    assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr


def test_run_writes_atomically_never_through_a_link_nor_over_its_input(tmp_path):
    coords, cond = make_request([12], 3)
    inputs = tmp_path / "d" / "x.safetensors"
    inputs.parent.mkdir()
    write_safetensors(inputs, {"coords": coords, "cond": cond[:, :5]})
    before = inputs.read_bytes()
    # The inputs file as the output: refused, through ".." and a linked folder too.
    (tmp_path / "link").symlink_to(tmp_path / "d")
    for out in (tmp_path / "d", tmp_path / "d" / ".." / "d", tmp_path / "link"):
        r = module("run", "--checkpoint", TINY, "--inputs", inputs, "--steps", 2, "--device",
                   "cpu", "--no-qualification-cache", "--out", out, cwd=tmp_path)
        assert r.returncode == 1 and "would overwrite its own input" in r.stderr, (out, r.stderr)
    assert inputs.read_bytes() == before
    # A link planted at the output's name: replaced, the file it points to untouched.
    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (out / "synthetic.safetensors").symlink_to(victim)
    r = module("run", "--checkpoint", TINY, "--tokens", 20, "--cond-tokens", 5, "--steps", 2,
               "--device", "cpu", "--no-qualification-cache", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (out / "synthetic.safetensors").is_symlink()
    assert victim.read_text() == "precious"
    # A run that fails (a missing checkpoint) leaves no new --out folder.
    r = module("run", "--checkpoint", tmp_path / "none.json", "--tokens", 5, "--device", "cpu",
               "--out", tmp_path / "new", cwd=tmp_path)
    assert r.returncode == 1 and not (tmp_path / "new").exists()
    # A write that fails (a file size limit of 4 blocks, as a full disk) leaves no file.
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    r = module("run", "--checkpoint", TINY, "--tokens", 500, "--cond-tokens", 5, "--steps", 1,
               "--device", "cpu", "--no-qualification-cache", "--out", tmp_path / "full",
               cwd=tmp_path, preexec_fn=limit)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "full").exists() or not os.listdir(tmp_path / "full"), \
        os.listdir(tmp_path / "full")


def test_a_file_name_that_is_not_utf8_passes_unchanged(tmp_path):
    out = os.path.join(os.fsencode(tmp_path), b"out-\xff")
    r = module("make-checkpoint", "--preset", "tiny", "--out", os.path.join(out, b"t"),
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(out, b"t.json"))


def test_the_callers_signal_handlers_are_put_back(tmp_path):
    # main() in a Python program: after it, Ctrl-C is Python's KeyboardInterrupt again.
    code = ("import os, signal, time\n"
            "from sparse3d_engine.__main__ import main\n"
            "assert main(['--version']) == 0\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('KeyboardInterrupt')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(),
                       timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                    signal.SIG_DFL))
    assert r.returncode == 0 and r.stdout.endswith("KeyboardInterrupt\n"), r
