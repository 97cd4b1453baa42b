"""The package as a whole: it imports without torch (and never imports it itself), it is
typed (py.typed, the native module's stub, annotations on the public API), and a type
checker accepts a user's script (where mypy is installed)."""
import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import sparse3d_engine as s3d
import sparse3d_engine.trellis2 as t2

PACKAGE = os.path.dirname(os.path.abspath(s3d.__file__))


def _python(code):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(PACKAGE)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=env)


def test_imports_without_torch_and_does_not_import_it():
    """The package and its command line never import torch; the drop-in (whose model is a
    torch.nn.Module where torch is installed) imports it only where it is installed."""
    r = _python("""
        import sys
        import sparse3d_engine, sparse3d_engine.__main__
        sparse3d_engine.build_info()
        assert "torch" not in sys.modules, "the package imported torch"
        sys.modules["torch"] = None          # as if torch were not installed
        import sparse3d_engine.trellis2
        try:
            sparse3d_engine.torch_ops
        except ImportError:
            print("no torch_ops without torch")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "no torch_ops without torch\n"


def test_typed():
    assert os.path.exists(os.path.join(PACKAGE, "py.typed"))
    stub = os.path.join(PACKAGE, "_native.pyi")
    if os.path.exists(stub):   # the build generates it (nanobind's stubgen)
        text = open(stub).read()
        for name in ("class Engine", "def set_message_sink", "def make_synthetic_checkpoint"):
            assert name in text


STUBGEN = os.path.join(os.path.dirname(__file__), "..", "..", "python", "stubgen.py")


@pytest.mark.skipif(not os.path.exists(STUBGEN) or shutil.which("cc") is None
                    or importlib.util.find_spec("nanobind") is None,
                    reason="a build step: needs the source tree's python/stubgen.py, nanobind "
                           "and a C compiler")
def test_stub_generator_imports_the_module_lazily(tmp_path):
    # The build's stub step where a cuDNN other than the package's is found (an older
    # libcudnn.so.9 without the symbols the module binds): a plain import fails there, the
    # stub generator still writes the stub. The stand-in library has no cuDNN symbol at all.
    lib = tmp_path / "lib"
    lib.mkdir()
    (tmp_path / "f.c").write_text("void stand_in(void) {}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcudnn.so.9", "-o",
                    str(lib / "libcudnn.so.9"), str(tmp_path / "f.c")], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib))
    plain = subprocess.run([sys.executable, "-c", "import _native"], cwd=PACKAGE, env=env,
                           capture_output=True, text=True)
    if plain.returncode == 0:
        pytest.skip("the module does not take cuDNN from LD_LIBRARY_PATH here")
    assert "undefined symbol" in plain.stderr
    out = tmp_path / "_native.pyi"
    r = subprocess.run([sys.executable, STUBGEN, PACKAGE, str(out)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "class Engine" in out.read_text()


def _unannotated(fn):
    sig = inspect.signature(fn)
    missing = [p.name for p in sig.parameters.values()
               if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               and p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__":
        missing.append("return")
    return missing


def test_the_public_api_is_annotated():
    public = [getattr(s3d, n) for n in s3d.__all__] + [getattr(t2, n) for n in t2.__all__]
    functions = [f for f in public if inspect.isfunction(f)]
    for cls in (s3d.Engine, t2.EngineFlowModel, t2.EngineSampler, t2.Acceleration):
        functions += [f for n, f in vars(cls).items()
                      if inspect.isfunction(f) and (not n.startswith("_") or n == "__init__")]
    for prop in ("resident", "model", "family", "device", "plan"):
        functions.append(vars(s3d.Engine)[prop].fget)
    bad = {f.__qualname__: m for f in functions if (m := _unannotated(f))}
    assert bad == {}


def test_a_type_checker_accepts_a_users_script(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed")
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import sparse3d_engine as s3d
        from sparse3d_engine.trellis2 import accelerate

        engine: s3d.Engine = s3d.Engine("tiny.json", device="cpu", log=print)
        latent = engine.sample(np.zeros((4, 4), np.int32), np.zeros((1, 2, 64), np.float32),
                               seed=1, sampler="released", progress=False)
        steps: int = s3d.SamplerSettings.released().steps
        paths: list = s3d.paths()
        ok: str = engine.fits(1000, 1, 1029)
        info = s3d.build_info()["libraries"]
        s3d.set_progress(False)
        acc = accelerate(object(), warm_up=["shape_slat_flow_model_512"])
        report: str = acc.report()
    """))
    r = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports",
                        "--follow-imports=silent", str(script)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "MYPYPATH": os.path.dirname(PACKAGE)},
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # And it catches a mistake.
    script.write_text("import sparse3d_engine as s3d\ns3d.set_progress()\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports",
                        "--follow-imports=silent", str(script)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "MYPYPATH": os.path.dirname(PACKAGE)},
                       cwd=tmp_path)
    assert r.returncode == 1 and "set_progress" in r.stdout


def _fake_torch(folder, cuda):
    """A folder holding a stand-in `torch` whose version.py says it was built for `cuda`
    (TRELLIS.2's PyTorch 2.6: "12.4"); importing it fails, as nothing should import it."""
    pkg = folder / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('the stand-in torch was imported')\n")
    value = "None" if cuda is None else repr(cuda)
    (pkg / "version.py").write_text(f"__version__ = '2.6.0'\ndebug = False\n"
                                    f"cuda: Optional[str] = {value}\nhip = None\n")
    return str(folder)


@pytest.mark.parametrize("cuda", ["12.4", "13.0", None])
def test_a_torch_of_another_cuda_major_is_refused_at_import(tmp_path, cuda):
    """PyTorch installed (not imported) for another CUDA major: the import refuses with one
    line naming the distribution to install; the same major, or a CPU build, imports."""
    from sparse3d_engine import _loader
    # The stand-in first: where the package is installed, a real torch may sit beside it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_fake_torch(tmp_path, cuda),
                                                        os.path.dirname(PACKAGE)])}
    env.pop("SPARSE3D_ENGINE_ALLOW_CUDA_MIX", None)
    r = subprocess.run([sys.executable, "-c", "import sparse3d_engine; print('imported')"],
                       capture_output=True, text=True, timeout=300, env=env)
    ours = _loader.CUDA_MAJOR
    if cuda is None or int(cuda.split(".")[0]) == ours:
        assert r.returncode == 0 and r.stdout == "imported\n", r.stderr
        return
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and last.startswith("ImportError: sparse3d_engine: this is "), r.stderr
    assert f"sparse3d-engine-cu{ours}" in last and f"built for CUDA {cuda}" in last, last
    assert last.endswith(f"pip install sparse3d-engine-cu{int(cuda.split('.')[0])})"), last
    # The escape hatch, for a process that never imports that torch.
    env["SPARSE3D_ENGINE_ALLOW_CUDA_MIX"] = "1"
    r = subprocess.run([sys.executable, "-c", "import sparse3d_engine; print('imported')"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout == "imported\n", r.stderr


def test_the_cuda_decision_for_each_mix():
    """check_torch's decision on every mix of this package's and PyTorch's CUDA major, and the
    version read from an imported torch module first."""
    from sparse3d_engine import _loader
    for ours, theirs, refused in ((13, "12.4", True), (13, "12.8", True), (12, "13.0", True),
                                  (12, "12.4", False), (12, "12.9", False), (13, "13.2", False),
                                  (13, None, False), (13, "", False), (13, "rocm", False)):
        try:
            _loader.check_torch(ours, theirs)
            got = False
        except ImportError as e:
            got = True
            assert f"sparse3d-engine-cu{int(theirs.split('.')[0])}" in str(e), e
        assert got == refused, (ours, theirs)
    import types
    saved = sys.modules.get("torch")
    try:
        sys.modules["torch"] = types.SimpleNamespace(version=types.SimpleNamespace(cuda="11.8"))
        assert _loader.torch_cuda() == "11.8"
    finally:
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved
