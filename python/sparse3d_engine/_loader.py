"""The CUDA libraries the native module links (cuBLASLt, NVRTC, cuDNN; for a CUDA 12 build
also the CUDA runtime), loaded before the module so that an installed wheel needs no
LD_LIBRARY_PATH, and reported: which copy, which version, from where.

For each library, in order:
  1. a copy already loaded in this process (PyTorch's, when torch was imported first) is
     used as it is: loading a second copy of the same library from another folder is what
     makes two packages fight;
  2. otherwise the copy in NVIDIA's wheels beside this package (site-packages/nvidia/...);
  3. otherwise the system's loader (the CUDA toolkit, LD_LIBRARY_PATH).
Before any of it, check_torch() refuses a PyTorch built for another CUDA major (one line naming
the distribution to install). Each is then checked against the floor this build declares (_build.CUDA_MAJOR picks the
set); one older than the floor is a warning on the "sparse3d_engine" logger, and the whole
list is logged at INFO at import (`s3d.build_info()` returns it).
"""
import ctypes
import importlib.util
import logging
import os
import re
import sys
from typing import Any, Dict, List, Optional

try:
    from . import _build
    CUDA_MAJOR = _build.CUDA_MAJOR
except ImportError:  # a source tree without a build: the CUDA 13 set
    CUDA_MAJOR = 13

log = logging.getLogger("sparse3d_engine")


class _Lib:
    def __init__(self, key, soname, folders, floor, version):
        self.key, self.soname, self.folders = key, soname, folders
        self.floor = floor        # (major, minor): the oldest this build works with
        self.version = version    # handle -> (major, minor, patch)


def _version_cublaslt(h):
    h.cublasLtGetVersion.restype = ctypes.c_size_t
    v = h.cublasLtGetVersion()
    return v // 10000, v // 100 % 100, v % 100


def _version_nvrtc(h):
    major, minor = ctypes.c_int(), ctypes.c_int()
    h.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value, 0


def _version_cudnn(h):
    h.cudnnGetVersion.restype = ctypes.c_size_t
    v = h.cudnnGetVersion()  # major * 10000 + minor * 100 + patch (cuDNN 9)
    return v // 10000, v // 100 % 100, v % 100


def _version_cudart(h):
    v = ctypes.c_int()
    h.cudaRuntimeGetVersion(ctypes.byref(v))
    return v.value // 1000, v.value // 10 % 100, 0


def _libraries(major):
    if major == 12:
        return (
            _Lib("cudart", "libcudart.so.12", ("cuda_runtime/lib",), (12, 4), _version_cudart),
            _Lib("cublasLt", "libcublasLt.so.12", ("cublas/lib",), (12, 4), _version_cublaslt),
            _Lib("nvrtc", "libnvrtc.so.12", ("cuda_nvrtc/lib",), (12, 4), _version_nvrtc),
            _Lib("cudnn", "libcudnn.so.9", ("cudnn/lib",), (9, 1), _version_cudnn),
        )
    return (
        _Lib("cublasLt", "libcublasLt.so.13", ("cu13/lib", "cublas/lib"), (13, 0), _version_cublaslt),
        _Lib("nvrtc", "libnvrtc.so.13", ("cu13/lib", "cuda_nvrtc/lib"), (13, 0), _version_nvrtc),
        _Lib("cudnn", "libcudnn.so.9", ("cudnn/lib",), (9, 10), _version_cudnn),
    )


LIBRARIES = _libraries(CUDA_MAJOR)
loaded: Dict[str, str] = {}            # soname -> the path it was loaded from
_report: List[Dict[str, Any]] = []     # one dict per library, filled by preload()


def _nvidia_roots():
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    return list(spec.submodule_search_locations)


def _mapped(soname):
    """The path of an already-loaded copy of `soname` in this process, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(soname):
                    return path
    except OSError:
        pass
    return None


def _who_loaded(path):
    if "torch" in path or "nvidia" in path:
        import sys
        return "already loaded (torch)" if "torch" in sys.modules else "already loaded"
    return "already loaded"


def preload():
    """Loads each library (see the module docstring) and records what was loaded."""
    roots = _nvidia_roots()
    _report.clear()
    for lib in LIBRARIES:
        entry = {"name": lib.key, "soname": lib.soname, "path": None, "source": None,
                 "version": None, "floor": "%d.%d" % lib.floor, "ok": None}
        handle = None
        path = _mapped(lib.soname)
        if path is not None:
            entry["source"] = _who_loaded(path)
            handle = ctypes.CDLL(lib.soname, mode=ctypes.RTLD_GLOBAL | getattr(os, "RTLD_NOLOAD", 4))
        else:
            for root in roots:
                for folder in lib.folders:
                    candidate = os.path.join(root, folder, lib.soname)
                    if os.path.exists(candidate):
                        handle = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                        entry["source"] = "NVIDIA wheel"
                        break
                if handle is not None:
                    break
            if handle is None:
                try:
                    handle = ctypes.CDLL(lib.soname, mode=ctypes.RTLD_GLOBAL)
                    entry["source"] = "system loader"
                except OSError:
                    entry["source"] = "not found"
        if handle is not None:
            entry["path"] = _mapped(lib.soname) or lib.soname
            loaded[lib.soname] = entry["path"]
            try:
                v = lib.version(handle)
                entry["version"] = "%d.%d.%d" % v
                entry["ok"] = v[:2] >= lib.floor
            except (AttributeError, OSError):
                entry["version"] = "unknown"
        _report.append(entry)
    for e in _report:
        if e["ok"] is False:
            log.warning("%s %s loaded from %s (%s) is older than %s, the oldest this build of "
                        "sparse3d_engine works with", e["soname"], e["version"], e["path"],
                        e["source"], e["floor"])
        else:
            log.info("%s %s from %s (%s)", e["soname"], e["version"], e["path"], e["source"])


def libraries():
    """The CUDA libraries this package loaded: a list of dicts with name, soname, version,
    path, source (already loaded / NVIDIA wheel / system loader / not found), floor (the
    oldest version this build works with) and ok (version >= floor; None when unknown)."""
    return [dict(e) for e in _report]


def distribution(major):
    """The name of the distribution built for CUDA `major`."""
    return "sparse3d-engine-cu%d" % major


def torch_cuda() -> Optional[str]:
    """The CUDA version ("12.4") the PyTorch of this environment was built for: the imported
    module's `torch.version.cuda` when torch is imported, else read from torch/version.py
    without importing torch (torch imported after this package would load its own CUDA
    libraries into the same process). None without torch, or for a build without CUDA."""
    module = sys.modules.get("torch")
    if module is not None:
        return getattr(getattr(module, "version", None), "cuda", None)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"""^cuda\b[^=\n]*=\s*(?:'([^']*)'|"([^"]*)")""", text, re.M)
    return (m.group(1) or m.group(2)) if m else None


def check_torch(major=None, cuda=None):
    """Refuses (ImportError, one line naming the distribution to install) a PyTorch built for
    another CUDA major version than this build: one process cannot hold two majors' cuDNN
    and cuBLAS (the same sonames), and the NVIDIA wheels of the two majors write the same
    files. SPARSE3D_ENGINE_ALLOW_CUDA_MIX=1 skips the check (a torch that is installed but
    never imported in the same process)."""
    major = CUDA_MAJOR if major is None else major
    cuda = torch_cuda() if cuda is None else cuda
    if not cuda or os.environ.get("SPARSE3D_ENGINE_ALLOW_CUDA_MIX") == "1":
        return
    try:
        theirs = int(str(cuda).split(".")[0])
    except ValueError:
        return
    if theirs != major:
        raise ImportError(
            "sparse3d_engine: this is %s (built for CUDA %d), but PyTorch here is built for "
            "CUDA %s: install the build for it instead (pip uninstall %s; pip install %s)"
            % (distribution(major), major, cuda, distribution(major), distribution(theirs)))


def explain(error):
    """The ImportError for a native module that did not load."""
    names = ", ".join(lib.soname for lib in LIBRARIES)
    wheels = ("nvidia-cuda-runtime-cu12 nvidia-cublas-cu12 nvidia-cuda-nvrtc-cu12 "
              "nvidia-cudnn-cu12" if CUDA_MAJOR == 12 else
              "nvidia-cublas nvidia-cuda-nvrtc nvidia-cudnn-cu13")
    return ImportError(
        f"sparse3d_engine's native module did not load: {error}. This build (CUDA "
        f"{CUDA_MAJOR}) needs {names}: `pip install {wheels}` (the wheel's declared "
        "dependencies), or put the CUDA toolkit's and cuDNN's lib folders on LD_LIBRARY_PATH.")
