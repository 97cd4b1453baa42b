"""The GLB export: TRELLIS.2's ``o_voxel.postprocess.to_glb`` and the GLB export after it, run
natively (docs/EXPORT.md). ``to_glb`` takes the original's arguments, in the original's order
and with its defaults, and returns a :class:`GlbMesh` whose ``export(path,
extension_webp=True)`` writes the file, so that a TRELLIS.2 user changes one import::

    from sparse3d_engine.trellis2 import to_glb     # was: from o_voxel.postprocess import to_glb
    glb = to_glb(vertices=mesh.vertices, faces=mesh.faces, attr_volume=mesh.attrs,
                 coords=mesh.coords, attr_layout=pipeline.pbr_attr_layout, grid_size=1024,
                 aabb=[[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]], decimation_target=500000,
                 texture_size=2048, remesh=True, remesh_band=1, remesh_project=0)
    glb.export("asset.glb", extension_webp=True)

Tensors may be torch tensors (CPU tensors are used in place; CUDA tensors are copied to the host
once, as the export runs on the CPU in this version) or NumPy arrays.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import Error, _native

__all__ = ["to_glb", "GlbMesh"]

_LAYOUT_WIDTH = {"base_color": 3, "metallic": 1, "roughness": 1, "alpha": 1}


def _host(x: Any, name: str, dtype: str):
    """A C-contiguous host array of `dtype` ('float32' or 'int32'), without a copy where the
    input already is one."""
    import numpy as np
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch: to the host once, bf16/f16 widened
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.is_floating_point() and x.element_size() < 4:
            x = x.float()
        x = x.numpy()
    try:
        a = np.asarray(x)
    except Exception as e:  # pragma: no cover - message only
        raise Error(f"{name}: not an array ({type(x).__name__}): {e}") from None
    if a.ndim != 2:
        raise Error(f"{name}: must be 2-D, got shape {tuple(a.shape)}")
    if a.dtype.kind not in ("f", "i", "u"):
        raise Error(f"{name}: must hold numbers, got dtype {a.dtype}")
    if dtype == "int32" and a.dtype.kind == "f":
        raise Error(f"{name}: must hold integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=dtype)


def _triple(x: Any, name: str, kind) -> Sequence:
    if hasattr(x, "detach"):
        x = x.detach().cpu().tolist()
    elif hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        x = [x, x, x]
    if not isinstance(x, (list, tuple)) or len(x) != 3:
        raise Error(f"{name}: must be one number or three, got {x!r}")
    return [kind(v) for v in x]


def _layout(attr_layout: Mapping[str, Any], channels: int) -> Sequence[int]:
    if not isinstance(attr_layout, Mapping):
        raise Error(f"attr_layout: must be a dict of slices, got {type(attr_layout).__name__}")
    firsts = []
    for key, width in _LAYOUT_WIDTH.items():
        if key not in attr_layout:
            raise Error(f"attr_layout: has no '{key}' (needs base_color, metallic, roughness, alpha)")
        s = attr_layout[key]
        start, stop, step = (s.start, s.stop, s.step) if isinstance(s, slice) else (None, None, 1)
        if start is None or stop is None or step not in (None, 1) or stop - start != width:
            raise Error(f"attr_layout['{key}']: must be a slice of {width} channel(s), got {s!r}")
        if start < 0 or stop > channels:
            raise Error(f"attr_layout['{key}']: channels {start}..{stop - 1} are outside the "
                        f"attr_volume's {channels} channels")
        firsts.append(int(start))
    return firsts


class GlbMesh:
    """The result of :func:`to_glb`: the output mesh (glTF axes) and its two textures."""

    def __init__(self, native: Any):
        self._m = native

    @property
    def vertices(self):
        return self._m.vertices()

    @property
    def faces(self):
        return self._m.faces()

    @property
    def uvs(self):
        return self._m.uvs()

    @property
    def vertex_normals(self):
        return self._m.vertex_normals()

    @property
    def base_color_texture(self):
        """uint8 [S, S, 4]: base colour and alpha."""
        return self._m.base_color_rgba().reshape(self._m.texture_size, self._m.texture_size, 4)

    @property
    def metallic_roughness_texture(self):
        """uint8 [S, S, 3]: 0, roughness, metallic (glTF's packing)."""
        return self._m.metallic_roughness_rgb().reshape(self._m.texture_size, self._m.texture_size, 3)

    def stage_seconds(self) -> Dict[str, float]:
        return dict(self._m.stage_seconds())

    def fallbacks(self) -> list:
        """What ran on the reference path instead of its fast path, and why."""
        return list(self._m.fallbacks())

    def export(self, file_obj: str, file_type: Optional[str] = None,
               extension_webp: bool = False, *, keep_alpha: bool = False,
               lossless: bool = False, **kwargs: Any) -> float:
        """Writes the .glb (atomically; WebP textures with EXT_texture_webp when
        ``extension_webp``, else PNG, as trimesh's export). Returns the seconds it took.
        The material is OPAQUE, as the original's, so viewers ignore alpha and the base-colour
        image is written as RGB; ``keep_alpha=True`` writes it as RGBA, as the original does.
        ``lossless=True`` (with ``extension_webp``) writes lossless WebP: the baked texels
        exactly, about 3-5x the bytes of the lossy default."""
        if file_type not in (None, "glb"):
            raise Error(f"export: only GLB is written, not {file_type!r}")
        if kwargs:
            raise Error(f"export: unknown arguments {sorted(kwargs)}")
        if not isinstance(file_obj, str):
            import os
            file_obj = os.fspath(file_obj)
        if not isinstance(keep_alpha, bool):
            raise Error(f"export: keep_alpha must be True or False, got {keep_alpha!r}")
        if not isinstance(lossless, bool):
            raise Error(f"export: lossless must be True or False, got {lossless!r}")
        if lossless and not extension_webp:
            raise Error("export: lossless=True is for WebP (extension_webp=True); PNG is "
                        "always lossless")
        return self._m.export_glb(file_obj, bool(extension_webp), keep_alpha, lossless)

    def __repr__(self) -> str:
        return (f"GlbMesh({self._m.num_faces} faces, {self._m.num_vertices} vertices, "
                f"{self._m.texture_size}^2 textures)")


def to_glb(vertices: Any, faces: Any, attr_volume: Any, coords: Any,
           attr_layout: Mapping[str, slice], aabb: Any,
           voxel_size: Union[float, Sequence[float], Any, None] = None,
           grid_size: Union[int, Sequence[int], Any, None] = None,
           decimation_target: int = 1000000, texture_size: int = 2048, remesh: bool = False,
           remesh_band: float = 1, remesh_project: float = 0.9,
           mesh_cluster_threshold_cone_half_angle_rad: float = math.radians(90.0),
           mesh_cluster_refine_iterations: int = 0, mesh_cluster_global_iterations: int = 1,
           mesh_cluster_smooth_strength: float = 1, verbose: bool = False,
           use_tqdm: bool = False, *, use_gpu: bool = True,
           atlas: str = "planar", remesh_drop_cavities: bool = False,
           simplifier: str = "shaped") -> GlbMesh:
    """``o_voxel.postprocess.to_glb``'s arguments and defaults; see the module's doc.
    ``use_gpu`` (sparse3d's own, keyword only): run the closest-point queries on the GPU where
    one is usable (the same bits as the CPU); what fell back is in ``GlbMesh.fallbacks()``.
    ``atlas`` (keyword only): ``"planar"`` (sparse3d's charts, packed at exactly
    ``texture_size``), ``"conformal"`` (the same with conformal charts wherever a conformal
    map keeps the texel density even: fewer charts and seams, a little slower) or
    ``"xatlas"`` (the original's library, slower).
    ``remesh_drop_cavities`` (keyword only): drop the surfaces the remesh puts around
    enclosed space (inside solids and closed walls, wound inward, never visible) before the
    simplification, so that faces and texels go to the visible surface; by default they are
    kept, as the original keeps them.
    ``simplifier`` (keyword only): ``"shaped"`` (sparse3d's edge collapse: even triangles and
    few faces folded over their neighbours, so the atlas's charts grow larger) or
    ``"meshoptimizer"`` (the reference: faster on the CPU)."""
    v = _host(vertices, "vertices", "float32")
    f = _host(faces, "faces", "int32")
    a = _host(attr_volume, "attr_volume", "float32")
    c = _host(coords, "coords", "int32")
    box = aabb.detach().cpu().tolist() if hasattr(aabb, "detach") else (
        aabb.tolist() if hasattr(aabb, "tolist") else aabb)
    if not (isinstance(box, (list, tuple)) and len(box) == 2 and all(
            isinstance(r, (list, tuple)) and len(r) == 3 for r in box)):
        raise Error(f"aabb: must be [[x, y, z], [x, y, z]], got {aabb!r}")
    lo, hi = [float(x) for x in box[0]], [float(x) for x in box[1]]
    if voxel_size is not None:
        vs = _triple(voxel_size, "voxel_size", float)
        if any(not (s > 0) for s in vs):
            raise Error(f"voxel_size: must be positive, got {vs}")
        grid = [int(round((hi[k] - lo[k]) / vs[k])) for k in range(3)]
    elif grid_size is not None:
        grid = _triple(grid_size, "grid_size", int)
    else:
        raise Error("to_glb: either voxel_size or grid_size must be given")
    firsts = _layout(attr_layout, a.shape[1])
    bar = None
    progress = None
    if use_tqdm or verbose:
        if use_tqdm:
            from tqdm import tqdm
            bar = tqdm(total=7 if remesh else 6, desc="Extracting GLB")

        def progress(stage: str, index: int, total: int) -> None:
            if bar is not None:
                if index:
                    bar.update(1)
                bar.set_description(stage)
            if verbose:
                print(f"[{index + 1}/{total}] {stage}", flush=True)
    try:
        native = _native.to_glb(v, f, a, c, firsts, lo + hi, grid, int(decimation_target),
                                int(texture_size), bool(remesh), float(remesh_band),
                                float(remesh_project),
                                float(mesh_cluster_threshold_cone_half_angle_rad),
                                int(mesh_cluster_refine_iterations),
                                int(mesh_cluster_global_iterations),
                                float(mesh_cluster_smooth_strength), bool(use_gpu), str(atlas),
                                bool(remesh_drop_cavities), str(simplifier), progress)
    finally:
        if bar is not None:
            bar.update(bar.total - bar.n)
            bar.close()
    return GlbMesh(native)
