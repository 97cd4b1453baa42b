"""Rewrites a copy of pyproject.toml for another CUDA major version's distribution:
    python3 scripts/pyproject_variant.py cu12 PATH/pyproject.toml
The name gets the suffix (sparse3d-engine-cu12) and the NVIDIA library dependencies become
that CUDA's wheels, as ranges that PyTorch's CUDA 12.4 builds satisfy (cuBLAS 12.4.5.8,
cuDNN 9.1.0.70, NVRTC and the runtime 12.4.127). The import package stays sparse3d_engine."""
import re
import sys

VARIANTS = {
    "cu12": {
        "name": "sparse3d-engine-cu12",
        "dependencies": ["numpy>=1.23", "nvidia-cuda-runtime-cu12>=12.4,<13",
                         "nvidia-cublas-cu12>=12.4,<13", "nvidia-cudnn-cu12>=9.1,<10",
                         "nvidia-cuda-nvrtc-cu12>=12.4,<13"],
        "build-requires": ["scikit-build-core>=0.10", "nanobind>=2.4",
                           "nvidia-cudnn-frontend==1.32.0", "nvidia-cudnn-cu12>=9.1,<10"],
    },
}


def toml_list(items):
    return "[" + ", ".join('"%s"' % i for i in items) + "]"


def rewrite(text, v):
    out, n = re.subn(r'(?m)^name = "sparse3d-engine-cu13"$', 'name = "%s"' % v["name"], text)
    if n != 1:
        raise SystemExit("pyproject_variant: no `name = \"sparse3d-engine-cu13\"` line")
    out, n = re.subn(r'(?ms)^dependencies = \[.*?\]$', "dependencies = " + toml_list(v["dependencies"]), out)
    if n != 1:
        raise SystemExit("pyproject_variant: no `dependencies = [...]` entry")
    out, n = re.subn(r'(?ms)^requires = \[.*?\]$', "requires = " + toml_list(v["build-requires"]), out)
    if n != 1:
        raise SystemExit("pyproject_variant: no build-system `requires = [...]` entry")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in VARIANTS:
        raise SystemExit("usage: pyproject_variant.py {%s} PATH" % ",".join(VARIANTS))
    with open(sys.argv[2]) as f:
        text = f.read()
    with open(sys.argv[2], "w") as f:
        f.write(rewrite(text, VARIANTS[sys.argv[1]]))
