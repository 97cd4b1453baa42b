"""Which faces of a mesh can be seen from outside it: the judge's optional split of its texture
error into the surface a viewer can see and the surface nobody can (judge.py --visible-views).

A face counts as visible when it is the nearest face at the centre of at least one pixel in at
least `min_views` (2) of `views` orthographic views from directions spread evenly over the
whole sphere (both sides of every face: the exports are double-sided), each `resolution` pixels
across the mesh's bounding cube. The views are exact z-buffers of the triangles (pixel centres
tested against each triangle's edges, depth interpolated in its plane), so a surface one tenth
of a voxel behind another is told apart. Two views, not one: of spider's decoded-surface
samples farther than 5e-3 of the diagonal from its GLB with the cavity fill, 782 lay on faces
drawn nearest in some view, and 712 of those 734 faces in one view of 64 only; the 16 of them
checked all have solid on both sides by the decoded surface's winding number
(hidden_samples.py), so a pixel centre had slipped between two of its triangles. What a view
cannot resolve is a face so thin that it covers no pixel centre in any view, which then counts
as hidden (`never_drawn` says how many faces no view drew at all, visible or not).

Seen from outside means from far away in some direction: the inside of a closed shell, a
void sealed in the model and the space between two shells of a thin wall are hidden; a
surface seen only through a narrow opening is visible when one of the directions passes
through it. NumPy only; the views run in parallel processes.
"""
import multiprocessing
import os

import numpy as np

# Faces with a projected bounding box up to this many pixels on a side are drawn in one
# vectorised pass per size; larger ones in chunks of this many pixel candidates.
_SMALL = 16
_CHUNK = 1 << 22
_FACE_BITS = 23  # up to 8 million faces; the depth takes the key's upper 40 bits


def sphere_directions(count):
    """`count` unit vectors spread evenly over the sphere (a Fibonacci lattice)."""
    i = np.arange(count) + 0.5
    z = 1.0 - 2.0 * i / count
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = np.pi * (1.0 + 5.0 ** 0.5) * i
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def _frame(d):
    """Two unit vectors that make a right-handed frame with d."""
    helper = np.array([1.0, 0.0, 0.0]) if abs(d[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    a = np.cross(d, helper)
    a /= np.linalg.norm(a)
    return a, np.cross(d, a)


def _candidates(x, y, ids, size):
    """Pixel candidates of faces ids whose boxes fit size x size pixels: (face, px, py)."""
    x0 = np.ceil(x[ids].min(axis=1) - 0.5).astype(np.int32)
    y0 = np.ceil(y[ids].min(axis=1) - 0.5).astype(np.int32)
    if size == 1:
        return ids, x0, y0
    ox, oy = np.meshgrid(np.arange(size, dtype=np.int32), np.arange(size, dtype=np.int32),
                         indexing="xy")
    face = np.repeat(ids, size * size)
    px = (x0[:, None] + ox.reshape(1, -1)).reshape(-1)
    py = (y0[:, None] + oy.reshape(1, -1)).reshape(-1)
    return face, px, py


def _inside(x, y, z, face, px, py, resolution):
    """Of the candidates, those whose pixel centre lies in the face's triangle, with the depth
    of the triangle's plane there."""
    cx, cy = px + np.float32(0.5), py + np.float32(0.5)
    xf, yf = x[face] - cx[:, None], y[face] - cy[:, None]
    w0 = xf[:, 1] * yf[:, 2] - xf[:, 2] * yf[:, 1]
    w1 = xf[:, 2] * yf[:, 0] - xf[:, 0] * yf[:, 2]
    w2 = xf[:, 0] * yf[:, 1] - xf[:, 1] * yf[:, 0]
    area = w0 + w1 + w2
    ok = ((w0 * area >= 0) & (w1 * area >= 0) & (w2 * area >= 0) & (area != 0) &
          (px >= 0) & (py >= 0) & (px < resolution) & (py < resolution))
    zf = z[face[ok]]
    depth = (w0[ok] * zf[:, 0] + w1[ok] * zf[:, 1] + w2[ok] * zf[:, 2]) / area[ok]
    return face[ok], px[ok], py[ok], depth


def _draw(zbuf, drawn, x, y, z, ids, size, resolution, lo, span):
    """Writes the nearest (depth, face) key of faces ids into zbuf at each pixel they cover,
    and marks in drawn the faces that cover a pixel centre."""
    per = size * size
    step = max(1, _CHUNK // per)
    for s in range(0, len(ids), step):
        face, px, py = _candidates(x, y, ids[s:s + step], size)
        face, px, py, depth = _inside(x, y, z, face, px, py, resolution)
        drawn[face] = True
        q = np.clip((depth - lo) / span * ((1 << 40) - 1), 0, (1 << 40) - 1).astype(np.int64)
        pix = py.astype(np.int64) * resolution + px
        np.minimum.at(zbuf, pix, (q << _FACE_BITS) | face)


def _views(v, f, directions, resolution):
    """visible_faces over the given view directions (v already centred; the cube's half side
    travels as v's last row)."""
    v, half = v[:-1], float(v[-1, 0])
    seen = np.zeros(len(f), dtype=np.int32)  # views in which the face is nearest somewhere
    drawn = np.zeros(len(f), dtype=bool)
    empty = np.iinfo(np.int64).max
    for d in directions:
        a, b = _frame(d)
        # float32 pixel coordinates: a hundredth of a pixel at 8,192 pixels
        x = ((v @ a / half * 0.5 + 0.5) * resolution).astype(np.float32)[f]
        y = ((v @ b / half * 0.5 + 0.5) * resolution).astype(np.float32)[f]
        z = (-(v @ d))[f]  # the viewer sits far along +d: nearer is smaller
        zbuf = np.full(resolution * resolution, empty, dtype=np.int64)
        # pixel centres px + 0.5 inside each face's box, per axis
        box = np.maximum(np.floor(x.max(1) - 0.5) - np.ceil(x.min(1) - 0.5),
                         np.floor(y.max(1) - 0.5) - np.ceil(y.min(1) - 0.5)).astype(np.int64) + 1
        for size in range(1, _SMALL + 1):
            ids = np.nonzero(box == size)[0]
            if len(ids):
                _draw(zbuf, drawn, x, y, z, ids, size, resolution, -half * 1.8, half * 3.6)
        for i in np.nonzero(box > _SMALL)[0]:
            _draw(zbuf, drawn, x, y, z, np.array([i]), int(box[i]), resolution, -half * 1.8,
                  half * 3.6)
        won = np.unique(zbuf[zbuf != empty] & ((1 << _FACE_BITS) - 1))
        seen[won] += 1
    return seen, drawn


_SHARED = {}


def _worker(directions):
    return _views(_SHARED["v"], _SHARED["f"], directions, _SHARED["resolution"])


def visible_faces(v, f, views=64, resolution=2048, workers=None, min_views=2):
    """(visible [F] bool, never_drawn [F] bool) of the mesh (v [V,3], f [F,3]): visible where
    the face is nearest at some pixel centre in at least min_views of the views. The views are
    shared among `workers` processes (default: every core)."""
    v, f = np.asarray(v, np.float64), np.asarray(f, np.int64)
    if len(f) >= (1 << _FACE_BITS):
        raise ValueError(f"visible_faces: {len(f)} faces, at most {(1 << _FACE_BITS) - 1}")
    lo_v, hi_v = v.min(axis=0), v.max(axis=0)
    centre, half = (lo_v + hi_v) / 2, 0.5 * float((hi_v - lo_v).max()) * 1.01 + 1e-12
    vc = np.concatenate([v - centre, [[half, 0.0, 0.0]]])
    directions = sphere_directions(views)
    workers = max(1, min(workers or os.cpu_count() or 1, views))
    if workers == 1:
        seen, drawn = _views(vc, f, directions, resolution)
        return seen >= min_views, ~drawn
    _SHARED.update(v=vc, f=f, resolution=resolution)  # inherited by the forked workers
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        parts = pool.map(_worker, [directions[k::workers] for k in range(workers)])
    _SHARED.clear()
    seen = np.sum([p[0] for p in parts], axis=0)
    drawn = np.logical_or.reduce([p[1] for p in parts])
    return seen >= min_views, ~drawn
