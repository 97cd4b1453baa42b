"""Other DLPack producers on the GPU: CuPy and JAX arrays in, results back in the caller's
framework, the same bits as NumPy inputs give. Skipped where the framework or a GPU is absent
(CI has neither; the H200 machine has both)."""
import os

import numpy as np
import pytest

import sparse3d_engine as s3d
from conftest import TINY, make_request

QUICK = s3d.SamplerSettings(steps=3, guidance_interval=(0.0, 1.0))


def reference(cache_dir, counts, seed):
    """The latent from NumPy inputs on the GPU engine, as NumPy."""
    e = s3d.Engine(TINY, device="cuda", cache_dir=cache_dir)
    coords, cond = make_request(counts, seed)
    noise = s3d.draw_noise(seed, len(coords), 32)
    latent = e.sample(coords, cond, noise=noise, sampler=QUICK)
    assert isinstance(latent, np.ndarray)  # NumPy inputs: a NumPy result, on the host
    return e, coords, cond, noise, latent


def gpu_available():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device (and torch to find it)")
def test_cupy_arrays_in_and_out(cache_dir):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    e, coords, cond, noise, want = reference(cache_dir, [90, 41], 3)
    latent = e.sample(cupy.asarray(coords), cupy.asarray(cond), noise=cupy.asarray(noise),
                      sampler=QUICK)
    assert isinstance(latent, cupy.ndarray) and latent.shape == (131, 32)
    np.testing.assert_array_equal(cupy.asnumpy(latent), want)
    # On a CuPy stream of the caller's.
    with cupy.cuda.Stream(non_blocking=True):
        on_stream = e.sample(cupy.asarray(coords), cupy.asarray(cond),
                             noise=cupy.asarray(noise), sampler=QUICK)
    np.testing.assert_array_equal(cupy.asnumpy(on_stream), want)


@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device (and torch to find it)")
def test_jax_arrays_in_and_out(cache_dir):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU shared
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    import jax.numpy as jnp
    e, coords, cond, noise, want = reference(cache_dir, [77], 4)
    latent = e.sample(jnp.asarray(coords), jnp.asarray(cond), noise=jnp.asarray(noise),
                      sampler=QUICK)
    assert isinstance(latent, jax.Array) and latent.shape == (77, 32)
    np.testing.assert_array_equal(np.asarray(latent), want)
