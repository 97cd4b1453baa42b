"""Geometry for the judge: area-weighted surface sampling, exact point-to-triangle projection,
nearest-surface queries accelerated by a k-d tree of dense surface samples, the trilinear
sampling of a sparse attribute volume, bilinear texture reads with glTF's conventions and a
coverage rasteriser for UV triangles. NumPy and SciPy only."""
import numpy as np
from scipy.spatial import cKDTree


def face_areas(v, f):
    return 0.5 * np.linalg.norm(np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]]), axis=1)


def face_normals(v, f):
    """Unit geometric normals (right-handed winding); zero for degenerate faces."""
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    length = np.linalg.norm(n, axis=1, keepdims=True)
    return np.divide(n, length, out=np.zeros_like(n), where=length > 0)


def sample_surface(v, f, n, rng):
    """n points uniform over the surface area: (points [n, 3], face ids [n], barycentric
    weights [n, 3]). A face is chosen with probability proportional to its area, then a point
    uniform inside it (the square-root warp of two uniforms)."""
    areas = face_areas(v, f)
    total = areas.sum()
    if not total > 0:
        raise ValueError("the surface has zero area")
    cdf = np.cumsum(areas)
    faces = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    faces = np.minimum(faces, len(f) - 1)
    r1, r2 = np.sqrt(rng.random(n)), rng.random(n)
    bary = np.stack([1 - r1, r1 * (1 - r2), r1 * r2], axis=1)
    tri = v[f[faces]]
    return np.einsum("nk,nkd->nd", bary, tri), faces, bary


def closest_on_triangles(p, a, b, c):
    """Closest point to each p[i] on triangle (a[i], b[i], c[i]), as barycentric weights [n, 3].
    The Voronoi-region case analysis of a triangle (vertex regions, then edge regions, then the
    interior); degenerate triangles fall back to their closest vertex or edge."""
    ab, ac, ap = b - a, c - a, p - a
    bp, cp = p - b, p - c
    d1, d2 = (ab * ap).sum(1), (ac * ap).sum(1)
    d3, d4 = (ab * bp).sum(1), (ac * bp).sum(1)
    d5, d6 = (ab * cp).sum(1), (ac * cp).sum(1)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = va + vb + vc
        v = np.where(denom != 0, vb / denom, 0.0)
        w = np.where(denom != 0, vc / denom, 0.0)
        bary = np.stack([1 - v - w, v, w], axis=1)
        # Edge and vertex regions, applied from the last test to the first so that the first
        # region that matches (in the order a sequential test would try them) wins.
        e = (d4 - d3) + (d5 - d6)
        t = np.where(e != 0, (d4 - d3) / e, 0.0)
        m = (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0)
        bary[m] = np.stack([np.zeros_like(t), 1 - t, t], axis=1)[m]
        t = np.where(d2 - d6 != 0, d2 / (d2 - d6), 0.0)
        m = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        bary[m] = np.stack([1 - t, np.zeros_like(t), t], axis=1)[m]
        m = (d6 >= 0) & (d5 <= d6)
        bary[m] = [0.0, 0.0, 1.0]
        t = np.where(d1 - d3 != 0, d1 / (d1 - d3), 0.0)
        m = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        bary[m] = np.stack([1 - t, t, np.zeros_like(t)], axis=1)[m]
        m = (d3 >= 0) & (d4 <= d3)
        bary[m] = [0.0, 1.0, 0.0]
        m = (d1 <= 0) & (d2 <= 0)
        bary[m] = [1.0, 0.0, 0.0]
    # The case analysis assumes a proper triangle; for a degenerate one (a segment or a point)
    # the closest point is the best of its three edges.
    cross = np.cross(ab, ac)
    scale = np.maximum.reduce([(ab * ab).sum(1), (ac * ac).sum(1), ((c - b) ** 2).sum(1)])
    flat = (cross * cross).sum(1) <= 1e-12 * scale * scale
    if np.any(flat):
        bary[flat] = _closest_on_edges(p[flat], a[flat], b[flat], c[flat])
    return bary


def _closest_on_edges(p, a, b, c):
    best, out = np.full(len(p), np.inf), np.zeros((len(p), 3))
    for i, j, s, t in ((0, 1, a, b), (1, 2, b, c), (0, 2, a, c)):
        d = t - s
        dd = (d * d).sum(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.clip(np.where(dd > 0, ((p - s) * d).sum(1) / dd, 0.0), 0.0, 1.0)
        dist = ((s + x[:, None] * d - p) ** 2).sum(1)
        m = dist < best
        best[m] = dist[m]
        row = np.zeros((len(p), 3))
        row[:, i], row[:, j] = 1 - x, x
        out[m] = row[m]
    return out


class Projector:
    """Nearest points on a triangle surface. Candidate faces for a query point are the faces of
    its k_samples nearest dense area-weighted surface samples (which find large faces) and its
    k_centroids nearest face centroids (which find small ones, however few samples they got),
    each through a k-d tree; the point is projected exactly onto the candidates. A candidate
    whose bounding sphere (centroid, farthest corner) lies farther than the best distance
    found on the first two candidates cannot win and is not projected, which changes no
    answer and saves most of the work.
    Error: the answer is exact whenever the true closest face is a candidate; otherwise the
    distance found exceeds the true one by at most the covering radius of the samples (about
    sqrt(area / samples), reported as `spacing`). README.md gives the miss rate measured
    against an exhaustive search."""

    def __init__(self, v, f, samples, rng, k_samples=4, k_centroids=8):
        self.v, self.f = np.asarray(v, np.float64), np.asarray(f, np.int64)
        self.ks, self.kc = k_samples, k_centroids
        self.points, self.sample_faces, self.sample_bary = sample_surface(self.v, self.f,
                                                                          samples, rng)
        self.tree = cKDTree(self.points)
        tri = self.v[self.f]
        self.centroids = tri.mean(axis=1)
        self.radius = np.sqrt(((tri - self.centroids[:, None]) ** 2).sum(2).max(1))
        self.centroid_tree = cKDTree(self.centroids)
        self.area = float(face_areas(self.v, self.f).sum())
        self.spacing = float(np.sqrt(self.area / samples))

    def _project(self, q, faces):
        """(squared distances, barycentric) of points q[i] onto faces[i]."""
        tri = self.v[self.f[faces]]
        bary = closest_on_triangles(q, tri[:, 0], tri[:, 1], tri[:, 2])
        diff = np.einsum("nk,nkd->nd", bary, tri) - q
        return np.einsum("nd,nd->n", diff, diff), bary

    def query(self, p, chunk=65536):
        """(closest points [n, 3], face ids [n], barycentric [n, 3], distances [n])."""
        n = len(p)
        out_f, out_b, out_d = np.empty(n, dtype=np.int64), np.empty((n, 3)), np.empty(n)
        ks, kc = min(self.ks, len(self.points)), min(self.kc, len(self.f))
        for s in range(0, n, chunk):
            q = np.asarray(p[s:s + chunk], dtype=np.float64)
            m = len(q)
            _, si = self.tree.query(q, k=ks, workers=-1)
            cd, ci = self.centroid_tree.query(q, k=kc, workers=-1)
            cand = np.concatenate([self.sample_faces[si.reshape(m, ks)], ci.reshape(m, kc)], 1)
            k = cand.shape[1]
            lower = np.linalg.norm(self.centroids[cand] - q[:, None], axis=2) - self.radius[cand]
            d2 = np.full((m, k), np.inf)
            bary = np.zeros((m, k, 3))
            for col in (0, ks):  # the nearest sample's face and the nearest centroid's face
                d2[:, col], bary[:, col] = self._project(q, cand[:, col])
            bound = np.sqrt(d2.min(axis=1))
            need = lower < bound[:, None] * (1 + 1e-9) + 1e-300
            need[:, [0, ks]] = False
            rows, cols = np.nonzero(need)
            d2[rows, cols], bary[rows, cols] = self._project(q[rows], cand[rows, cols])
            best = np.argmin(d2, axis=1)
            r = np.arange(m)
            out_f[s:s + m] = cand[r, best]
            out_b[s:s + m] = bary[r, best]
            out_d[s:s + m] = np.sqrt(d2[r, best])
        tri = self.v[self.f[out_f]]
        return np.einsum("nk,nkd->nd", out_b, tri), out_f, out_b, out_d

    def _radius_classes(self):
        """The faces in classes whose bounding-sphere radii are within a factor 2 of each other,
        a k-d tree of centroids each (made on first use): a ball query then reaches past a
        face by at most its class's largest radius, not the largest of the whole surface. One
        class for all made a few large faces (a flat CAD part's) pull hundreds of thousands of
        candidates into every query, and tens of GB of lists."""
        if getattr(self, "_classes", None) is None:
            r = self.radius
            positive = r[r > 0]
            lo = float(positive.min()) if len(positive) else 1.0
            k = np.ceil(np.log2(np.maximum(r, lo) / lo)).astype(np.int64)
            self._classes = []
            for c in np.unique(k):
                ids = np.nonzero(k == c)[0]
                self._classes.append((ids, cKDTree(self.centroids[ids]), float(r[ids].max())))
        return self._classes

    def exact(self, q, upper, budget=1 << 22):
        """Exact distances of points q [n, 3] to the surface, each known to be at most upper[i]
        (a query's answer): every face whose bounding sphere comes within upper[i] is
        projected, class by class of radius (the bound shrinking as answers improve), in
        chunks of points holding at most `budget` candidates (a point with more alone)."""
        q = np.asarray(q, dtype=np.float64)
        out = np.asarray(upper, dtype=np.float64).copy()
        if len(q) == 0:
            return out
        for ids, tree, rmax in self._radius_classes():
            counts = np.asarray(tree.query_ball_point(q, out + rmax, return_length=True,
                                                      workers=-1), dtype=np.int64)
            total = np.cumsum(counts)
            start = 0
            while start < len(q):
                base = total[start - 1] if start else 0
                end = max(start + 1, int(np.searchsorted(total, base + budget, side="right")))
                lists = tree.query_ball_point(q[start:end], out[start:end] + rmax, workers=-1)
                n = np.fromiter((len(c) for c in lists), dtype=np.int64, count=end - start)
                if n.sum():
                    rows = np.repeat(np.arange(start, end), n)
                    cand = ids[np.concatenate([np.asarray(c, dtype=np.int64) for c in lists
                                               if len(c)])]
                    keep = (np.linalg.norm(self.centroids[cand] - q[rows], axis=1)
                            - self.radius[cand] <= out[rows])
                    rows, cand = rows[keep], cand[keep]
                    for s in range(0, len(rows), 1 << 20):  # bounded memory
                        r, c = rows[s:s + (1 << 20)], cand[s:s + (1 << 20)]
                        d2, _ = self._project(q[r], c)
                        np.minimum.at(out, r, np.sqrt(d2))
                start = end
        return out

    def exact_max(self, q, d, batch=4096):
        """The largest exact distance of the points q to the surface, given their query
        answers d (each at least the exact one): the largest answers are made exact, batch by
        batch, until the largest exact one is no smaller than every answer left."""
        d = np.asarray(d)
        order = np.argsort(-d)
        best = 0.0
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            if best >= d[idx[0]]:
                break
            best = max(best, float(self.exact(np.asarray(q)[idx], d[idx]).max()))
        return best


class SparseVolume:
    """The attribute volume of a case, sampled like FlexGEMM's grid_sample_3d (trilinear):
    a point p becomes g = (p - aabb_lo) / voxel_size in grid units, voxel (x, y, z) is centred
    at (x, y, z) + 0.5, the eight voxels around g are weighted prod(1 - |g - centre|), voxels
    absent from the sparse set (or outside the grid) are dropped and the remaining weights
    renormalised to sum 1; a point with no present neighbour samples to 0."""

    def __init__(self, coords, attrs, grid, aabb):
        self.grid = np.asarray(grid, dtype=np.int64)
        self.lo = np.asarray(aabb[0], dtype=np.float64)
        self.voxel = (np.asarray(aabb[1], dtype=np.float64) - self.lo) / self.grid
        keys = self._keys(np.asarray(coords, dtype=np.int64))
        order = np.argsort(keys, kind="stable")
        self.keys, self.attrs = keys[order], np.asarray(attrs, dtype=np.float64)[order]
        if len(self.keys) > 1 and np.any(self.keys[1:] == self.keys[:-1]):
            raise ValueError("the case repeats a voxel")

    def _keys(self, c):
        return (c[:, 0] * self.grid[1] + c[:, 1]) * self.grid[2] + c[:, 2]

    def sample(self, p, chunk=262144):
        out = np.zeros((len(p), self.attrs.shape[1]))
        for s in range(0, len(p), chunk):
            g = (p[s:s + chunk] - self.lo) / self.voxel
            base = np.floor(g - 0.5).astype(np.int64)
            acc = np.zeros((len(g), self.attrs.shape[1]))
            wsum = np.zeros(len(g))
            for corner in range(8):
                off = np.array([(corner >> 2) & 1, (corner >> 1) & 1, corner & 1])
                c = base + off
                w = np.prod(np.clip(1 - np.abs(g - (c + 0.5)), 0, None), axis=1)
                inside = np.all((c >= 0) & (c < self.grid), axis=1)
                key = self._keys(np.where(inside[:, None], c, 0))
                pos = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
                found = inside & (self.keys[pos] == key) & (w > 0)
                acc[found] += w[found, None] * self.attrs[pos[found]]
                wsum[found] += w[found]
            ok = wsum > 0
            acc[ok] /= wsum[ok, None]
            out[s:s + chunk] = acc
        return out


def wrap_index(i, n, mode):
    if mode == 33071:  # CLAMP_TO_EDGE
        return np.clip(i, 0, n - 1)
    if mode == 33648:  # MIRRORED_REPEAT
        period = np.mod(i, 2 * n)
        return np.where(period < n, period, 2 * n - 1 - period)
    return np.mod(i, n)  # REPEAT


def sample_texture(tex, uv):
    """Bilinear read of a Texture at glTF UVs: u = 0 is the image's left edge, v = 0 its top
    edge, texel (i, j) is centred at ((i + 0.5) / W, (j + 0.5) / H); wrap per the sampler."""
    h, w = tex.pixels.shape[:2]
    x, y = uv[:, 0] * w - 0.5, uv[:, 1] * h - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    xa, xb = wrap_index(x0, w, tex.wrap_s), wrap_index(x0 + 1, w, tex.wrap_s)
    ya, yb = wrap_index(y0, h, tex.wrap_t), wrap_index(y0 + 1, h, tex.wrap_t)
    px = tex.pixels
    top = px[ya, xa] * (1 - fx) + px[ya, xb] * fx
    bottom = px[yb, xa] * (1 - fx) + px[yb, xb] * fx
    return top * (1 - fy) + bottom * fy


def rasterize_coverage(tri_px, width, height, batch=1 << 22):
    """Boolean [height, width] mask of texels whose centre (i + 0.5, j + 0.5) lies inside (or on
    the edge of) at least one triangle; tri_px is [F, 3, 2] in texel units (x right, y down).
    Triangles are clipped to the image (no wrapping). Scanlines: for every texel row a
    triangle crosses, the span between its edges' crossings of the row's centre line is
    marked in a difference array (+1 at the span's first texel, -1 after its last), whose
    running sum along each row is then the number of triangles covering a texel. The cost is
    one row per triangle and row, whatever the triangle's width; `batch` bounds the rows
    handled at once (whole triangles, at least one)."""
    tri_px = np.asarray(tri_px, dtype=np.float64)
    tri_px = tri_px[np.all(np.isfinite(tri_px.reshape(len(tri_px), -1)), axis=1)]
    y0 = np.clip(np.ceil(tri_px[:, :, 1].min(axis=1) - 0.5), 0, height).astype(np.int64)
    y1 = np.clip(np.floor(tri_px[:, :, 1].max(axis=1) - 0.5), -1, height - 1).astype(np.int64)
    rows = np.maximum(y1 - y0 + 1, 0)
    keep = np.nonzero(rows)[0]
    diff = np.zeros(height * (width + 1), dtype=np.int64)
    start = 0
    while start < len(keep):
        csum = np.cumsum(rows[keep[start:]])
        stop = start + max(1, int(np.searchsorted(csum, batch, side="right")))
        ids = keep[start:stop]
        _scan(tri_px[ids], y0[ids], rows[ids], width, diff)
        start = stop
    return np.cumsum(diff.reshape(height, width + 1), axis=1)[:, :width] > 0


def _scan(t, y0, rows, width, diff):
    rep = np.repeat(np.arange(len(t)), rows)
    y = y0[rep] + np.arange(rows.sum()) - np.repeat(np.cumsum(rows) - rows, rows)
    py = y + 0.5
    lo = np.full(len(y), np.inf)
    hi = np.full(len(y), -np.inf)
    for k in range(3):
        a, b = t[rep, k], t[rep, (k + 1) % 3]
        ymin, ymax = np.minimum(a[:, 1], b[:, 1]), np.maximum(a[:, 1], b[:, 1])
        crosses = (ymin <= py) & (py <= ymax)
        dy = b[:, 1] - a[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = a[:, 0] + (py - a[:, 1]) * (b[:, 0] - a[:, 0]) / dy
        flat = dy == 0  # a horizontal edge on the row's centre line: both ends count
        x_lo = np.where(flat, np.minimum(a[:, 0], b[:, 0]), x)
        x_hi = np.where(flat, np.maximum(a[:, 0], b[:, 0]), x)
        lo = np.where(crosses, np.minimum(lo, x_lo), lo)
        hi = np.where(crosses, np.maximum(hi, x_hi), hi)
    x0 = np.clip(np.ceil(lo - 0.5 - 1e-9), 0, width)
    x1 = np.clip(np.floor(hi - 0.5 + 1e-9), -1, width - 1)
    ok = np.isfinite(lo) & (x0 <= x1)
    x0, x1, y = x0[ok].astype(np.int64), x1[ok].astype(np.int64), y[ok]
    size = len(diff)
    diff += np.bincount(y * (width + 1) + x0, minlength=size)
    diff -= np.bincount(y * (width + 1) + x1 + 1, minlength=size)
