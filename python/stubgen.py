"""Writes the native module's type stub (_native.pyi) at build time: nanobind's stub generator
over the module just built, run by CMake (the target sparse3d_native_stub).

The stub generator imports the module. The module needs cuDNN, cuBLASLt and the CUDA runtime,
and at build time it finds whatever the system has: in the isolated environment of
`pip install .` that may be no cuDNN of the package's own (that comes with the
nvidia-cudnn-cu13 wheel at run time) but an older one from the CUDA toolkit's folder, which
lacks symbols the module uses. Python binds every symbol at import (RTLD_NOW); the stub needs
only the module's signatures, never a CUDA call, so here the module is imported with lazy
binding. Should it still not import (a library missing altogether), the build goes on without
the stub and says so on stderr: the package works without it (its Python API is annotated);
only the private module's types are missing.

Usage: stubgen.py PACKAGE_DIR OUTPUT
"""
import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: stubgen.py PACKAGE_DIR OUTPUT", file=sys.stderr)
        return 2
    package_dir, output = argv
    if os.path.exists(output):
        os.remove(output)  # no stale stub from an earlier build
    sys.path.insert(0, package_dir)  # _native as a top-level module: no package imports
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_LOCAL)
    try:
        import _native  # noqa: F401  (the import the stub generator would make)
    except ImportError as e:
        print(f"sparse3d build: warning: no _native.pyi: the module does not import here ({e}); "
              "the package works without it, only the native module's types are missing",
              file=sys.stderr)
        return 0
    from nanobind.stubgen import main as stubgen
    stubgen(["-m", "_native", "-o", output])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
