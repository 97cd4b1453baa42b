"""Finds the CUDA libraries the native module links (cuBLASLt, cuDNN) in the NVIDIA wheels
that pip installed beside sparse3d, and loads them before the module, so that an installed
wheel needs no LD_LIBRARY_PATH. Where no wheel has them, the system's loader looks (the CUDA
toolkit, LD_LIBRARY_PATH)."""
import ctypes
import importlib.util
import os

# (folders under site-packages/nvidia, library), in load order. NVRTC: cudnn-frontend
# compiles some kernels at run time with it.
_WHEEL_LIBRARIES = (
    (("cu13/lib", "cublas/lib"), "libcublasLt.so.13"),
    (("cu13/lib", "cuda_nvrtc/lib"), "libnvrtc.so.13"),
    (("cudnn/lib",), "libcudnn.so.9"),
)

loaded = {}  # library -> the path it was loaded from (s3d.build_info() reports it)


def _nvidia_roots():
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    return list(spec.submodule_search_locations)


def preload():
    roots = _nvidia_roots()
    for folders, name in _WHEEL_LIBRARIES:
        for root in roots:
            for folder in folders:
                candidate = os.path.join(root, folder, name)
                if os.path.exists(candidate):
                    ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                    loaded[name] = candidate
                    break
            if name in loaded:
                break


def explain(error):
    """The ImportError for a native module that did not load."""
    return ImportError(
        f"sparse3d's native module did not load: {error}. It needs libcublasLt.so.13 (CUDA 13 "
        "cuBLAS), libnvrtc.so.13 and libcudnn.so.9: `pip install nvidia-cublas "
        "nvidia-cuda-nvrtc nvidia-cudnn-cu13` (the wheel's declared dependencies), or put the "
        "CUDA toolkit's and cuDNN's lib folders on LD_LIBRARY_PATH.")
