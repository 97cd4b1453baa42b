"""`python -m sparse3d_engine` (info, make-checkpoint, run) in a subprocess, with only the
package on PYTHONPATH: no build tree, no `sparse3d` binary. Where the C++ CLI is at hand
(SPARSE3D_CLI), its files and latents are the reference, byte for byte."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import sparse3d_engine as s3d
from sparse3d_engine import _safetensors
from conftest import TINY as _TINY, make_request

TINY = os.path.abspath(_TINY)   # the commands run in their own folders

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(s3d.__file__)))
CLI = os.environ.get("SPARSE3D_CLI")


def module(*args, cwd=None, timeout=600):
    """python -m sparse3d_engine ARGS with the package alone on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE3D_CLI", "PYTHONPATH")}
    env["PYTHONPATH"] = PACKAGE_ROOT
    env["SPARSE3D_ENGINE_PROGRESS"] = "0"
    return subprocess.run([sys.executable, "-m", "sparse3d_engine", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def test_info(tmp_path):
    r = module("info", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"sparse3d_engine {s3d.__version__}\n")
    assert "CUDA libraries:" in r.stdout and "default path" in r.stdout
    r = module("info", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["version"] == s3d.__version__
    assert info["default_path"] == s3d.default_path()
    assert isinstance(info["libraries"], list)
    for lib in info["libraries"]:
        assert {"name", "version", "path"} <= set(lib)
    assert set(info["packages"]) >= {"numpy", "torch", "tqdm"}


def test_version_suggestions_and_the_gpu_line(tmp_path):
    r = module("--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == f"sparse3d_engine {s3d.__version__}\n", r
    r = module("runn", cwd=tmp_path)
    assert r.returncode == 2 and "invalid choice: 'runn'" in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("did you mean 'run'?"), r.stderr
    r = module("run", "--checkpoint", TINY, "--stepz", "3", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.rstrip().endswith("did you mean --steps?"), r.stderr
    r = module("info", cwd=tmp_path)
    gpu = [line for line in r.stdout.splitlines() if line.startswith("  GPU ")]
    assert len(gpu) == 1, r.stdout
    info = json.loads(module("info", "--json", cwd=tmp_path).stdout)
    assert isinstance(info["environment"]["has_gpu"], bool)
    assert ("none (CPU backend)" in gpu[0]) == (not info["environment"]["has_gpu"])


def test_control_characters_in_an_echoed_value_are_escaped(tmp_path):
    for args, needle in ((("make-checkpoint", "--preset", "x\x1b[31m", "--out", tmp_path / "m"),
                          "'x\\x1b[31m'"),
                         (("run", "--checkpoint", "a\nb.json"), "a\\x0ab.json"),
                         (("runn\x1b[2J",), "'runn\\x1b[2J'")):
        r = module(*args, cwd=tmp_path)
        assert r.returncode in (1, 2) and needle in r.stderr, (args, r.stderr)
        assert "\x1b" not in r.stderr and r.stderr.count("\n") <= 2, (args, r.stderr)
    assert not (tmp_path / "m.json").exists()


def test_make_checkpoint_writes_what_the_cpp_command_writes(tmp_path):
    r = module("make-checkpoint", "--preset", "tiny", "--seed", 3, "--out", tmp_path / "a" / "tiny",
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tiny" in r.stdout and "SLatFlowModel" in r.stdout
    json_path, st_path = tmp_path / "a" / "tiny.json", tmp_path / "a" / "tiny.safetensors"
    assert json.loads(json_path.read_text())["name"] == "SLatFlowModel"
    # The in-process call and the command write the same bytes.
    c = s3d.make_synthetic_checkpoint(tmp_path / "b" / "tiny", preset="tiny", seed=3)
    assert c["family"] == "SLatFlowModel" and c["parameters"] > 0
    assert (tmp_path / "b" / "tiny.safetensors").read_bytes() == st_path.read_bytes()
    assert (tmp_path / "b" / "tiny.json").read_bytes() == json_path.read_bytes()
    # f32, and the dense preset.
    r = module("make-checkpoint", "--preset", "tiny-ss", "--dtype", "f32", "--out",
               tmp_path / "ss", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    e = s3d.Engine(tmp_path / "ss.json", device="cpu", persist_qualification=False)
    assert e.family == s3d.DENSE
    if CLI:
        subprocess.run([CLI, "make-checkpoint", "--preset", "tiny", "--seed", "3", "--out",
                        str(tmp_path / "cli" / "tiny")], check=True, capture_output=True)
        assert (tmp_path / "cli" / "tiny.safetensors").read_bytes() == st_path.read_bytes()
        assert (tmp_path / "cli" / "tiny.json").read_bytes() == json_path.read_bytes()


def test_make_checkpoint_errors(tmp_path):
    r = module("make-checkpoint", "--preset", "huge", "--out", tmp_path / "x", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("sparse3d_engine: error: ") and "tiny" in r.stderr
    assert not (tmp_path / "x.json").exists()
    r = module("make-checkpoint", "--preset", "tiny", cwd=tmp_path)   # no --out: argparse
    assert r.returncode == 2 and "--out" in r.stderr
    assert "tiny" in s3d.synthetic_presets() and "trellis2-ss-16" in s3d.synthetic_presets()


def test_run_a_synthetic_request(tmp_path):
    r = module("run", "--checkpoint", TINY, "--tokens", 50, "--steps", 2, "--seed", 4,
               "--device", "cpu", "--no-qualification-cache", "--out", tmp_path / "out",
               "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[synthetic] 50 tokens" in r.stdout and "fallbacks:" in r.stdout
    tensors, metadata = _safetensors.read(str(tmp_path / "out" / "synthetic.safetensors"))
    assert tensors["latent"].shape == (50, 32) and tensors["coords"].shape == (50, 4)
    assert metadata["steps"] == "2" and metadata["seed"] == "4"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["latent"]["shape"] == [50, 32] and summary["stats"]["tokens"] == 50
    # The same request in process: the same bits (coords from the file, noise from the seed).
    e = s3d.Engine(TINY, device="cpu", persist_qualification=False)
    coords = tensors["coords"]
    rng = np.random.default_rng(4)
    rng.choice(64 ** 3, size=50, replace=False)
    cond = rng.standard_normal((1, 64, 64)).astype(np.float32)
    sampler = s3d.SamplerSettings(steps=2)
    want = e.sample(coords, cond, seed=4, sampler=sampler, progress=False)
    assert np.array_equal(tensors["latent"], want)
    # .npy output.
    r = module("run", "--checkpoint", TINY, "--tokens", 20, "--steps", 1, "--device", "cpu",
               "--no-qualification-cache", "--out", tmp_path / "npy", "--format", "npy",
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "npy" / "synthetic.npy").shape == (20, 32)


def _write_inputs(path, coords, cond, noise=None, bf16_cond=False):
    tensors = {"coords": coords}
    if noise is not None:
        tensors["noise"] = noise
    _safetensors.write(str(path), tensors)
    if not bf16_cond:
        _safetensors.write(str(path), dict(tensors, cond=cond))
        return
    # A bf16 cond: written by hand (NumPy has no bfloat16): the upper halves of the f32s.
    bits = (cond.view(np.uint32) >> 16).astype(np.uint16)
    header = {"cond": {"dtype": "BF16", "shape": list(cond.shape), "data_offsets": [0, bits.nbytes]}}
    offset = bits.nbytes
    blobs = [bits.tobytes()]
    for name, a in tensors.items():
        header[name] = {"dtype": "I32" if a.dtype == np.int32 else "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


@pytest.mark.parametrize("bf16_cond", [False, True])
def test_run_an_inputs_file(tmp_path, bf16_cond):
    coords, cond = make_request([37, 21], 6)
    cond = cond[:, :5]
    if bf16_cond:   # values a bf16 holds exactly
        cond = ((cond.view(np.uint32) >> 16) << 16).view(np.float32)
    cond = np.ascontiguousarray(cond)
    noise = s3d.draw_noise(8, coords.shape[0], 32)
    path = tmp_path / "req.safetensors"
    _write_inputs(path, coords, cond, noise, bf16_cond)
    r = module("run", "--checkpoint", TINY, "--inputs", path, "--steps", 3, "--device", "cpu",
               "--no-qualification-cache", "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[req] 58 tokens" in r.stdout and "noise from the inputs" in r.stdout
    got, metadata = _safetensors.read(str(tmp_path / "out" / "req.safetensors"))
    e = s3d.Engine(TINY, device="cpu", persist_qualification=False)
    want = e.sample(coords, cond, noise=noise, sampler=s3d.SamplerSettings(steps=3),
                    progress=False)
    assert np.array_equal(got["latent"], want)
    assert np.array_equal(got["coords"], coords) and metadata["inputs"] == str(path)
    if CLI and bf16_cond:
        # The C++ command on the same file (it keeps cond in bf16): the same latent.
        c = subprocess.run([CLI, "run", "--checkpoint", TINY, "--inputs", str(path), "--steps",
                            "3", "--device", "cpu", "--no-qualification-cache", "--out",
                            str(tmp_path / "cli")], capture_output=True, text=True)
        assert c.returncode == 0, c.stderr
        cli, _ = _safetensors.read(str(tmp_path / "cli" / "req.safetensors"))
        assert np.array_equal(cli["latent"], got["latent"])


def test_run_errors(tmp_path):
    coords, cond = make_request([10], 6)
    bad = tmp_path / "bad.safetensors"
    _safetensors.write(str(bad), {"coords": coords, "cond": cond, "extra": cond})
    r = module("run", "--checkpoint", TINY, "--inputs", bad, "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("sparse3d_engine: error: inputs ") and "extra" in r.stderr
    nocond = tmp_path / "nocond.safetensors"
    _safetensors.write(str(nocond), {"coords": coords})
    r = module("run", "--checkpoint", TINY, "--inputs", nocond, "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 1 and "no 'cond'" in r.stderr
    (tmp_path / "junk.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    r = module("run", "--checkpoint", TINY, "--inputs", tmp_path / "junk.safetensors",
               "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 1 and "not JSON" in r.stderr
    # The engine's own refusal (cond channels) is one line too.
    wrong = tmp_path / "wrong.safetensors"
    _safetensors.write(str(wrong), {"coords": coords, "cond": cond[:, :, :7].copy()})
    r = module("run", "--checkpoint", TINY, "--inputs", wrong, "--device", "cpu",
               "--no-qualification-cache", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("sparse3d_engine: error: ")
    r = module("run", "--checkpoint", tmp_path / "missing.json", "--device", "cpu", cwd=tmp_path)
    assert r.returncode == 1 and "missing.json" in r.stderr


def _raw(path, header, data=b""):
    """A safetensors file with exactly this header (any JSON text) and data."""
    text = header.encode() if isinstance(header, str) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def test_malformed_inputs_are_one_line_errors(tmp_path):
    """Each was a traceback (or an accepted file) before: one `error:` line, exit 1."""
    cases = {
        "offsets3": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16, 0]}},
                     "data_offsets [0, 16, 0] (two integers"),
        "offsets_str": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": ["0", "16"]}},
                        "data_offsets ['0', '16']"),
        "dtype_list": ({"cond": {"dtype": ["I32"], "shape": [1, 4], "data_offsets": [0, 16]}},
                       "has dtype ['I32']"),
        "shape_bool": ({"cond": {"dtype": "F32", "shape": [True, 4], "data_offsets": [0, 16]}},
                       "has shape [True, 4]"),
        "wraps": ({"cond": {"dtype": "F32", "shape": [2 ** 62, 4], "data_offsets": [0, 0]}},
                  "more than the 2147483648"),
        "huge": ({"coords": {"dtype": "I32", "shape": [201326592, 4], "data_offsets":
                             [0, 201326592 * 16]}}, "more than the 2147483648"),
        "overlap": ({"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]},
                     "noise": {"dtype": "F32", "shape": [1, 4], "data_offsets": [8, 24]}},
                    "share bytes"),
        "twice": ('{"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]}, '
                  '"cond": {"dtype": "F32", "shape": [1, 4], "data_offsets": [0, 16]}}',
                  "names 'cond' twice"),
    }
    for name, (header, needle) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        _raw(path, header, bytes(32))
        r = module("run", "--checkpoint", TINY, "--inputs", path, "--device", "cpu",
                   cwd=tmp_path, timeout=60)
        assert r.returncode == 1 and needle in r.stderr, (name, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (name, r.stderr)
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    r = module("run", "--checkpoint", TINY, "--inputs", fifo, "--device", "cpu", cwd=tmp_path,
               timeout=60)
    assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr


def test_numeric_options_are_usage_errors_by_name(tmp_path):
    for args, needle in ((("--seed", "-1"), "--seed: '-1' is outside"),
                         (("--cond-tokens", "-1"), "--cond-tokens: '-1' is outside"),
                         (("--cond-tokens", "10000000000"), "--cond-tokens: '10000000000' is "
                                                            "outside [1, 65536]"),
                         (("--tokens", "1e3"), "--tokens: '1e3' is not an integer"),
                         (("--steps", "0"), "--steps: '0' is outside [1, 10000]")):
        r = module("run", "--checkpoint", TINY, "--device", "cpu", *args, cwd=tmp_path)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)


def test_run_writes_atomically_never_through_a_link_nor_over_its_input(tmp_path):
    coords, cond = make_request([12], 3)
    inputs = tmp_path / "d" / "x.safetensors"
    inputs.parent.mkdir()
    _safetensors.write(str(inputs), {"coords": coords, "cond": cond[:, :5].copy()})
    before = inputs.read_bytes()
    # The inputs file as the output: refused, through ".." and a linked folder too.
    (tmp_path / "link").symlink_to(tmp_path / "d")
    for out in (tmp_path / "d", tmp_path / "d" / ".." / "d", tmp_path / "link"):
        r = module("run", "--checkpoint", TINY, "--inputs", inputs, "--steps", 2, "--device",
                   "cpu", "--no-qualification-cache", "--out", out, cwd=tmp_path)
        assert r.returncode == 1 and "is the inputs file itself" in r.stderr, (out, r.stderr)
    assert inputs.read_bytes() == before
    # Links planted at the output's name and at the old fixed temporary's: replaced, the files
    # they point to untouched.
    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in ("synthetic.safetensors.tmp", "synthetic.npy", "synthetic.safetensors"):
        (out / name).symlink_to(victim)
    for fmt in ("npy", "safetensors"):
        r = module("run", "--checkpoint", TINY, "--tokens", 20, "--cond-tokens", 5, "--steps", 2,
                   "--device", "cpu", "--no-qualification-cache", "--out", out, "--format", fmt,
                   cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert not (out / f"synthetic.{fmt}").is_symlink()
    assert victim.read_text() == "precious"
    assert np.load(out / "synthetic.npy").shape == (20, 32)
    # A run that fails (a missing checkpoint) leaves no new --out folder.
    r = module("run", "--checkpoint", tmp_path / "none.json", "--device", "cpu", "--out",
               tmp_path / "new", cwd=tmp_path)
    assert r.returncode == 1 and not (tmp_path / "new").exists()
    # A write that fails (a file size limit of 4 blocks, as a full disk) leaves no file.
    import resource
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE3D_CLI", "PYTHONPATH")}
    env.update(PYTHONPATH=PACKAGE_ROOT, SPARSE3D_ENGINE_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "sparse3d_engine", "run", "--checkpoint", TINY,
                        "--tokens", "500", "--cond-tokens", "5", "--steps", "1", "--device",
                        "cpu", "--no-qualification-cache", "--out", str(tmp_path / "full")],
                       capture_output=True, text=True, env=env, preexec_fn=limit, cwd=tmp_path)
    assert r.returncode != 0
    assert not (tmp_path / "full").exists() or not os.listdir(tmp_path / "full"), \
        os.listdir(tmp_path / "full")


def test_make_checkpoint_into_a_folder_name_is_refused(tmp_path):
    r = module("make-checkpoint", "--preset", "tiny", "--out", str(tmp_path / "d") + "/",
               cwd=tmp_path)
    assert r.returncode == 1 and "names a folder" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists() or not os.listdir(tmp_path / "d")


def test_the_safetensors_writer_and_reader_round_trip(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(6, dtype=np.int32).reshape(2, 3)
    h = np.linspace(0, 1, 5).astype(np.float16)
    _safetensors.write(str(tmp_path / "x.safetensors"), {"h": h, "a": a, "b": b}, {"k": "v"})
    got, metadata = _safetensors.read(str(tmp_path / "x.safetensors"))
    assert metadata == {"k": "v"}
    for name, want in (("a", a), ("b", b), ("h", h)):
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want)
    # The repository's independent reader agrees.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
    import same_bits
    raw = same_bits.tensors(str(tmp_path / "x.safetensors"))
    assert raw["a"][0] == "F32" and list(raw["b"][1]) == [2, 3]
