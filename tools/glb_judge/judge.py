"""The GLB judge: compares GLB files made from one case (what TRELLIS.2's decoders hand to
o_voxel.postprocess.to_glb) against that case and against each other.

  python3 tools/glb_judge/judge.py --case CASE.safetensors --glb ours=a.glb \
      --glb original=b.glb [--target-faces N] --out DIR

Writes DIR/judge.json and DIR/views_CASE.png and prints a short table. Axes: a GLB vertex
(x, y, z) is the input point (x, -z, y) (to_glb turned the input's +Z up into glTF's +Y up).
D below is the diagonal of the input surface's bounding box; every distance is divided by it.

Metrics, per GLB:
  faces, vertices, faces_within_target  triangle count (after the default scene's transforms),
      and faces <= --target-faces.
  chamfer_glb_to_input, chamfer_input_to_glb  mean distance from N area-uniform samples of one
      surface to the other surface (N = --samples, 1,000,000 by default), and chamfer, their
      average; hausdorff, the largest of all those distances (both ways) and of the
      distances of every GLB vertex to the input, the largest ones made exact
      (hausdorff_samples: the samples' answers alone, as before 2026-12-04, which moved by 30%
      with the seed on one surface).
      Distances are exact point-to-triangle distances to candidate faces: those of the 4
      nearest of N samples of the target surface and of its 8 nearest face centroids, found
      through k-d trees (meshops.Projector). Sampling error: a found distance is exact when
      the nearest face is a candidate (it was in 2,999 of 3,000 queries checked exhaustively
      on a 4.5M-face surface; README.md) and otherwise exceeds the true one by at most the
      target samples' covering radius (about sqrt(area / N), reported as spacing_*); the
      means carry the Monte Carlo error std / sqrt(N) (about 1e-3 relative at N = 1e6); the
      Hausdorff distance can be underestimated by about the source samples' spacing, since
      only samples are measured.
  normal_consistency  mean |cos| between the GLB's face normal at each GLB sample and the input
      face normal at its nearest input point (1 = parallel; orientation is ignored).
  texture_mae  at the first T GLB samples (T = --texture-samples, 200,000 by default), the
      base colour (r, g, b), metallic and roughness read from the GLB's textures through its
      UVs (bilinear, glTF convention: u = 0 left, v = 0 the image's top row, texel centres at
      half-integers, the sampler's wrap, REPEAT by default; metallic = B and roughness = G of
      the metallic-roughness texture; times the material's factors), against the case's
      attribute volume sampled trilinearly (FlexGEMM's rule, meshops.SparseVolume) at the
      nearest input-surface point: mean absolute difference per channel in [0, 1] (8-bit
      texels / 255, no sRGB decoding, as to_glb writes the attributes straight into the
      bytes); alpha is reported too. Monte Carlo error std / sqrt(T).
  seam band  the GLB's UV triangles are rasterised at each base colour texture's resolution
      (a texel is covered when its centre lies in a triangle); the band is the uncovered texels
      within 4 texels (Euclidean, centre to centre) of a covered one; unfilled band texels are
      those whose base colour alpha byte is 0 (a texture without an alpha channel: whose RGB
      is 0 0 0 while the nearest covered texel has a channel of at least 16, so that black
      beside a black chart is not counted); reported as seam_band_texels, seam_unfilled_texels, seam_unfilled_fraction.
      Exact (no sampling).
  atlas_utilisation  covered texels / all texels of the base colour textures. Exact.
  charts  connected components of the faces through shared vertex indices of the GLB's index
      buffer (a GLB splits vertices at UV seams); charts_welded merges vertices with identical
      position and UV first, in case a writer duplicates vertices inside a chart.
  stretch_mean, stretch_p95  per face r = (UV area / total UV area) / (3D area / total 3D area)
      over faces with non-zero 3D area, mean and 95th percentile of max(r, 1/r); faces whose
      UV area is 0 are left out and counted in uv_collapsed_faces.
  check  check_glb.check_glb's result (structure, loaders); file_size in bytes.
Views: DIR/views_CASE.png, one row per GLB (and a first row, "input", of the input surface
coloured by the attribute volume), three views (front, side, top) of 512 x 512 each, made by
a point splat of the N dense textured samples (splat_render.py), not by a rasteriser."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_glb  # noqa: E402
import glbfile  # noqa: E402
import meshops  # noqa: E402
import safetensors_lite  # noqa: E402
import splat_render  # noqa: E402
import visibility  # noqa: E402

CHANNELS = ("r", "g", "b", "metallic", "roughness", "alpha")
# A texture without alpha: a black band texel counts as unfilled when the nearest covered texel
# has a channel at least this bright, in 8-bit levels (seam_band).
UNFILLED_NEIGHBOUR_LEVEL = 16


def glb_to_input(p):
    return np.stack([p[:, 0], -p[:, 2], p[:, 1]], axis=1)


def input_to_glb(p):
    return np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1)


class Case:
    """A case file: the decoded surface, the sparse attribute volume and its frame."""

    def __init__(self, path):
        tensors, meta = safetensors_lite.read(path)
        for name in ("vertices", "faces", "coords", "attrs"):
            if name not in tensors:
                raise ValueError(f"{path}: no tensor '{name}'")
        self.path, self.meta = path, meta
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.vertices = tensors["vertices"].astype(np.float64)
        self.faces = tensors["faces"].astype(np.int64)
        self.coords, self.attrs = tensors["coords"], tensors["attrs"]
        if self.faces.size and (self.faces.min() < 0 or self.faces.max() >= len(self.vertices)):
            raise ValueError(f"{path}: a face index is outside the {len(self.vertices)} vertices")
        self.aabb = np.array(json.loads(meta.get("aabb", "[[-0.5,-0.5,-0.5],[0.5,0.5,0.5]]")))
        grid = json.loads(meta["grid_size"]) if "grid_size" in meta else None
        if grid is None:
            raise ValueError(f"{path}: metadata has no grid_size")
        self.grid = np.array([grid] * 3 if isinstance(grid, int) else grid, dtype=np.int64)
        layout = json.loads(meta.get("attr_layout", '{"base_color":[0,3],"metallic":[3,4],'
                                     '"roughness":[4,5],"alpha":[5,6]}'))
        self.layout = {k: slice(*v) for k, v in layout.items()}
        self.volume = meshops.SparseVolume(self.coords, self.attrs, self.grid, self.aabb)
        lo, hi = self.vertices.min(axis=0), self.vertices.max(axis=0)
        self.diag = float(np.linalg.norm(hi - lo))

    def reference(self, points):
        """[n, 6] r, g, b, metallic, roughness, alpha of the volume at input-axes points."""
        raw = self.volume.sample(points)
        cols = [raw[:, self.layout["base_color"]], raw[:, self.layout["metallic"]],
                raw[:, self.layout["roughness"]], raw[:, self.layout["alpha"]]]
        return np.concatenate(cols, axis=1)


def read_material_values(glb, faces, bary):
    """[n, 6] r, g, b, metallic, roughness, alpha read from the GLB at points on `faces` with
    barycentric `bary`; rows without the UVs a texture needs are NaN."""
    out = np.full((len(faces), 6), np.nan)
    mats = glb.face_material[faces]
    for m in np.unique(mats):
        sel = np.nonzero(mats == m)[0]
        mat = glb.materials[int(m)]
        base = np.tile(mat.base_factor, (len(sel), 1))
        mr = np.tile([1.0, mat.roughness_factor, mat.metallic_factor], (len(sel), 1))
        for tex, target in ((mat.base, base), (mat.mr, mr)):
            if tex is None:
                continue
            uv_set = glb.uv.get(tex.tex_coord)
            if uv_set is None:
                target[:] = np.nan
                continue
            uv = np.einsum("nk,nkd->nd", bary[sel], uv_set[glb.faces[faces[sel]]])
            ok = np.all(np.isfinite(uv), axis=1)
            values = np.full((len(sel), tex.pixels.shape[2]), np.nan)
            values[ok] = meshops.sample_texture(tex, uv[ok])
            target *= values[:, :target.shape[1]]
        out[sel, 0:3] = base[:, 0:3]
        out[sel, 3] = mr[:, 2]
        out[sel, 4] = mr[:, 1]
        out[sel, 5] = base[:, 3]
    return out


def texture_space_metrics(glb):
    """Seam band, unfilled texels and atlas utilisation over the base colour textures."""
    from scipy.ndimage import distance_transform_edt
    totals = {"texels": 0, "covered": 0, "band": 0, "unfilled": 0}
    rules, seen = set(), set()
    for m, mat in glb.materials.items():
        tex = mat.base
        if tex is None or tex.image_index in seen or tex.tex_coord not in glb.uv:
            continue
        seen.add(tex.image_index)
        faces = glb.faces[np.isin(glb.face_material, [k for k, other in glb.materials.items()
                                                      if other.base is not None and
                                                      other.base.image_index == tex.image_index])]
        h, w = tex.pixels.shape[:2]
        tri = glb.uv[tex.tex_coord][faces] * np.array([w, h])
        covered = meshops.rasterize_coverage(tri, w, h)
        dist, (ny, nx) = distance_transform_edt(~covered, return_indices=True)
        band = ~covered & (dist <= 4.0)
        if tex.has_alpha:
            empty = tex.pixels[..., 3] == 0
            rules.add("alpha == 0")
        else:
            # Black where the nearest covered texel is not dark: a fill copies what is near, so
            # a black band texel beside a black chart is the chart's colour, not a hole.
            rgb = tex.pixels[..., :3]
            empty = (np.all(rgb == 0, axis=2) &
                     (rgb[ny, nx].max(axis=2) * 255 >= UNFILLED_NEIGHBOUR_LEVEL - 0.5))
            rules.add(f"rgb == 0 beside a covered texel of level >= {UNFILLED_NEIGHBOUR_LEVEL} "
                      "(no alpha channel)")
        totals["texels"] += w * h
        totals["covered"] += int(covered.sum())
        totals["band"] += int(band.sum())
        totals["unfilled"] += int((band & empty).sum())
    if not totals["texels"]:
        return {"atlas_utilisation": None, "seam_band_texels": 0, "seam_unfilled_texels": 0,
                "seam_unfilled_fraction": None, "seam_unfilled_rule": "no base colour texture"}
    return {"atlas_utilisation": totals["covered"] / totals["texels"],
            "seam_band_texels": totals["band"], "seam_unfilled_texels": totals["unfilled"],
            "seam_unfilled_fraction": totals["unfilled"] / max(totals["band"], 1),
            "seam_unfilled_rule": ", ".join(sorted(rules))}


def chart_metrics(glb):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    def count(faces, nverts):
        a = np.concatenate([faces[:, 0], faces[:, 1]])
        b = np.concatenate([faces[:, 1], faces[:, 2]])
        graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(nverts, nverts))
        _, labels = connected_components(graph, directed=False)
        return int(len(np.unique(labels[faces[:, 0]])))

    out = {"charts": count(glb.faces, len(glb.positions))}
    uv = glb.uv.get(0, np.full((len(glb.positions), 2), np.nan))
    key = np.ascontiguousarray(np.concatenate([glb.positions, np.nan_to_num(uv, nan=-7.0)], 1))
    _, inverse = np.unique(key.view(np.dtype((np.void, key.dtype.itemsize * 5))).reshape(-1),
                           return_inverse=True)
    out["charts_welded"] = count(inverse.reshape(-1)[glb.faces], int(inverse.max()) + 1)
    return out


def stretch_metrics(glb):
    if 0 not in glb.uv:
        return {"stretch_mean": None, "stretch_p95": None, "uv_collapsed_faces": None}
    a3 = meshops.face_areas(glb.positions, glb.faces)
    t = glb.uv[0][glb.faces]
    e1, e2 = t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]
    a2 = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    ok = (a3 > 0) & np.isfinite(a2)
    collapsed = ok & (a2 == 0)
    use = ok & (a2 > 0)
    if not use.any():
        return {"stretch_mean": None, "stretch_p95": None,
                "uv_collapsed_faces": int(collapsed.sum())}
    r = (a2[use] / a2[ok].sum()) / (a3[use] / a3[ok].sum())
    s = np.maximum(r, 1.0 / r)
    return {"stretch_mean": float(s.mean()), "stretch_p95": float(np.percentile(s, 95)),
            "uv_collapsed_faces": int(collapsed.sum())}


def input_visibility(case, opts):
    """Visible faces of the decoded surface (computed once per case, for every GLB)."""
    if getattr(case, "visible", None) is None:
        case.visible, _ = visibility.visible_faces(case.vertices, case.faces, opts.visible_views,
                                                   opts.visible_resolution)
    return case.visible


def visible_metrics(case, input_proj, glb_proj, pos_in, faces, opts, d_glb, d_in, diff, ok):
    """The distances and the texture error again, over the samples on visible surface only
    (visibility.py): the GLB's samples on faces of the GLB seen from outside, the decoded
    surface's samples on its own faces seen from outside. Sample maxima, not exact."""
    t0 = time.time()
    vis, never = visibility.visible_faces(pos_in, faces, opts.visible_views,
                                          opts.visible_resolution)
    area = meshops.face_areas(pos_in, faces)
    on_glb = vis[glb_proj.sample_faces]
    on_in = input_visibility(case, opts)[input_proj.sample_faces]
    tvis = on_glb[:len(diff)] & ok
    thid = ~on_glb[:len(diff)] & ok
    diag = case.diag
    out = {"visible": {
        "views": opts.visible_views, "resolution": opts.visible_resolution,
        "glb_area_share": float(area[vis].sum() / max(area.sum(), 1e-30)),
        "glb_faces_never_drawn": int(never.sum()),
        "input_sample_share": float(on_in.mean()),
        "chamfer_glb_to_input": float(d_glb[on_glb].mean() / diag) if on_glb.any() else None,
        "chamfer_input_to_glb": float(d_in[on_in].mean() / diag) if on_in.any() else None,
        "hausdorff_samples": float(max(d_glb[on_glb].max(initial=0), d_in[on_in].max(initial=0))
                                   / diag),
        "texture_samples": int(tvis.sum()),
        "texture_mae": {c: (float(diff[tvis, i].mean()) if tvis.any() else None)
                        for i, c in enumerate(CHANNELS)},
        "hidden_texture_mae": {c: (float(diff[thid, i].mean()) if thid.any() else None)
                               for i, c in enumerate(CHANNELS)}}}
    v = out["visible"]
    v["seconds"] = round(time.time() - t0, 2)  # inside the texture stage's seconds too
    if v["chamfer_glb_to_input"] is not None and v["chamfer_input_to_glb"] is not None:
        v["chamfer"] = 0.5 * (v["chamfer_glb_to_input"] + v["chamfer_input_to_glb"])
    return out


def judge_one(case, input_proj, path, opts, rng):
    """The metrics of one GLB against the case, and what the views need."""
    res = {"path": path, "file_size": os.path.getsize(path) if os.path.exists(path) else None}
    t0 = time.time()
    res["check"] = check_glb.check_glb(path)
    try:
        glb = glbfile.load_glb(path)
    except (glbfile.GlbError, OSError, KeyError, IndexError, TypeError, ValueError) as e:
        res["error"] = f"cannot be judged: {e}"
        return res, None
    res["faces"], res["vertices"] = int(len(glb.faces)), int(len(glb.positions))
    if opts.target_faces is not None:
        res["faces_within_target"] = bool(len(glb.faces) <= opts.target_faces)
    try:
        return measure(case, input_proj, glb, res, opts, rng, t0)
    except Exception as e:  # noqa: BLE001 (one GLB that breaks a metric must not stop the rest)
        res["error"] = f"cannot be judged: {type(e).__name__}: {e}"
        return res, None


def measure(case, input_proj, glb, res, opts, rng, t0):
    """judge_one's metrics of a loaded GLB."""
    pos_in = glb_to_input(glb.positions)
    glb_proj = meshops.Projector(pos_in, glb.faces, opts.samples, rng)
    t1 = time.time()
    near, near_face, _, d_glb = input_proj.query(glb_proj.points)
    _, _, _, d_in = glb_proj.query(input_proj.points)
    # The largest distances made exact, over the samples of both surfaces and every vertex of
    # the GLB: a query's answer can exceed the exact distance by up to the samples' spacing
    # (about the size of the maximum itself at 300,000 samples), and the maximum of those
    # answers moved by 30% with the seed on one and the same surface. (The input's millions
    # of vertices are left out: their queries would double the judge's time.)
    d_glb_v = input_proj.query(pos_in)[3]
    h_glb = input_proj.exact_max(np.concatenate([glb_proj.points, pos_in]),
                                 np.concatenate([d_glb, d_glb_v]))
    h_in = glb_proj.exact_max(input_proj.points, d_in)
    diag = case.diag
    res.update(chamfer_glb_to_input=float(d_glb.mean() / diag),
               chamfer_input_to_glb=float(d_in.mean() / diag),
               hausdorff=float(max(h_glb, h_in) / diag),
               hausdorff_samples=float(max(d_glb.max(), d_in.max()) / diag),
               spacing_input=input_proj.spacing / diag, spacing_glb=glb_proj.spacing / diag)
    res["chamfer"] = 0.5 * (res["chamfer_glb_to_input"] + res["chamfer_input_to_glb"])
    n_glb = meshops.face_normals(pos_in, glb.faces)[glb_proj.sample_faces]
    n_in = meshops.face_normals(case.vertices, case.faces)[near_face]
    cos = np.abs((n_glb * n_in).sum(axis=1))
    valid = (np.abs(n_glb).sum(1) > 0) & (np.abs(n_in).sum(1) > 0)
    res["normal_consistency"] = float(cos[valid].mean()) if valid.any() else None
    t2 = time.time()
    got = read_material_values(glb, glb_proj.sample_faces, glb_proj.sample_bary)
    tcount = min(opts.texture_samples, len(got))
    want = case.reference(near[:tcount])
    diff = np.abs(got[:tcount] - want)
    ok = np.all(np.isfinite(diff), axis=1)
    res["texture_samples"] = int(ok.sum())
    res["texture_samples_without_uv"] = int((~ok).sum())
    res["texture_mae"] = {c: (float(diff[ok, i].mean()) if ok.any() else None)
                          for i, c in enumerate(CHANNELS)}
    if opts.visible_views:
        res.update(visible_metrics(case, input_proj, glb_proj, pos_in, glb.faces, opts,
                                   d_glb, d_in, diff, ok))
    t3 = time.time()
    res.update(texture_space_metrics(glb))
    res.update(chart_metrics(glb))
    res.update(stretch_metrics(glb))
    t4 = time.time()
    res["seconds"] = {"check": round(t1 - t0, 2), "geometry": round(t2 - t1, 2),
                      "texture": round(t3 - t2, 2), "atlas": round(t4 - t3, 2)}
    colors = got[:, 0:3]
    colors = np.where(np.isfinite(colors), colors, 0.5)
    view = (glb.positions[glb.faces[glb_proj.sample_faces]] * glb_proj.sample_bary[:, :, None]
            ).sum(axis=1)
    return res, (view, input_to_glb(meshops.face_normals(pos_in, glb.faces)
                                    [glb_proj.sample_faces]), colors)


def judge(case_path, glbs, out_dir, target_faces=None, samples=1_000_000,
          texture_samples=200_000, view_size=512, seed=0, render=True, visible_views=0,
          visible_resolution=2048):
    """Runs the judge; glbs is a list of (name, path). Returns the result dict (also written
    to out_dir/judge.json). visible_views > 0 adds each GLB's "visible" figures."""
    opts = argparse.Namespace(target_faces=target_faces, samples=samples,
                              texture_samples=texture_samples, visible_views=visible_views,
                              visible_resolution=visible_resolution)
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    case = Case(case_path)
    rng = np.random.default_rng(seed)
    input_proj = meshops.Projector(case.vertices, case.faces, samples, rng)
    result = {"case": {"path": case_path, "name": case.name, "source": case.meta.get("source"),
                       "faces": int(len(case.faces)), "vertices": int(len(case.vertices)),
                       "voxels": int(len(case.coords)), "grid_size": case.grid.tolist(),
                       "bbox_diagonal": case.diag},
              "settings": {"samples": samples, "texture_samples": texture_samples,
                           "target_faces": target_faces, "seed": seed, "band_texels": 4},
              "glbs": {}}
    rows, labels = [], []
    for name, path in glbs:
        # Every GLB draws the same random stream, so its numbers do not depend on its order.
        res, view = judge_one(case, input_proj, path, opts, np.random.default_rng(seed + 1))
        result["glbs"][name] = res
        if view is not None:
            rows.append(view)
            labels.append(name)
    if render:
        t = time.time()
        ref = case.reference(input_proj.points)[:, 0:3]
        rows.insert(0, (input_to_glb(input_proj.points),
                        input_to_glb(meshops.face_normals(case.vertices, case.faces)
                                     [input_proj.sample_faces]), ref))
        labels.insert(0, "input")
        lo, hi = case.vertices.min(axis=0), case.vertices.max(axis=0)
        center = input_to_glb(((lo + hi) / 2)[None])[0]
        half = 0.55 * float((hi - lo).max())
        images = [splat_render.render_views(p, n, c, center, half, view_size)
                  for p, n, c in rows]
        path = os.path.join(out_dir, f"views_{case.name}.png")
        splat_render.compose(images, labels, view_size).save(path)
        result["views"] = path
        result["render_seconds"] = round(time.time() - t, 2)
    result["seconds"] = round(time.time() - t0, 2)
    with open(os.path.join(out_dir, "judge.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


ROWS = (("faces", "faces", "{}"), ("within target", "faces_within_target", "{}"),
        ("chamfer (/D)", "chamfer", "{:.2e}"), ("hausdorff (/D)", "hausdorff", "{:.2e}"),
        ("normal consistency", "normal_consistency", "{:.4f}"),
        ("MAE r", ("texture_mae", "r"), "{:.4f}"), ("MAE g", ("texture_mae", "g"), "{:.4f}"),
        ("MAE b", ("texture_mae", "b"), "{:.4f}"),
        ("MAE metallic", ("texture_mae", "metallic"), "{:.4f}"),
        ("MAE roughness", ("texture_mae", "roughness"), "{:.4f}"),
        ("seam unfilled frac", "seam_unfilled_fraction", "{:.4f}"),
        ("atlas utilisation", "atlas_utilisation", "{:.3f}"), ("charts", "charts", "{}"),
        ("stretch mean", "stretch_mean", "{:.3f}"), ("stretch p95", "stretch_p95", "{:.3f}"),
        ("structure ok", ("check", "ok"), "{}"), ("file size", "file_size", "{}"),
        ("visible area share", ("visible", "glb_area_share"), "{:.3f}"),
        ("visible chamfer", ("visible", "chamfer"), "{:.2e}"),
        ("visible hausdorff*", ("visible", "hausdorff_samples"), "{:.2e}"),
        ("visible MAE r", ("visible", "texture_mae", "r"), "{:.4f}"),
        ("visible MAE g", ("visible", "texture_mae", "g"), "{:.4f}"),
        ("visible MAE b", ("visible", "texture_mae", "b"), "{:.4f}"),
        ("visible MAE metal", ("visible", "texture_mae", "metallic"), "{:.4f}"),
        ("hidden MAE r", ("visible", "hidden_texture_mae", "r"), "{:.4f}"))


def table(result):
    names = list(result["glbs"])
    lines = [f"case {result['case']['name']}: {result['case']['faces']} input faces, "
             f"{result['case']['voxels']} voxels"]
    lines.append("".ljust(20) + "".join(n[:18].rjust(20) for n in names))
    for label, key, fmt in ROWS:
        cells = []
        for n in names:
            value = result["glbs"][n]
            for k in (key if isinstance(key, tuple) else (key,)):
                value = value.get(k) if isinstance(value, dict) else None
            cells.append("-" if value is None else fmt.format(value))
        if isinstance(key, tuple) and key[0] == "visible" and all(c == "-" for c in cells):
            continue  # judged without --visible-views
        lines.append(label.ljust(20) + "".join(c.rjust(20) for c in cells))
    for n in names:
        if "error" in result["glbs"][n]:
            lines.append(f"{n}: {result['glbs'][n]['error']}")
        for p in result["glbs"][n].get("check", {}).get("problems", [])[:5]:
            lines.append(f"{n}: {p}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description="Compare GLBs made from one case.")
    ap.add_argument("--case", required=True)
    ap.add_argument("--glb", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--target-faces", type=int)
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--texture-samples", type=int, default=200_000)
    ap.add_argument("--view-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-views", action="store_true")
    ap.add_argument("--visible-views", type=int, default=0,
                    help="also judge the surface seen from outside, from this many directions")
    ap.add_argument("--visible-resolution", type=int, default=2048)
    args = ap.parse_args()
    glbs = []
    for item in args.glb:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            ap.error(f"--glb {item!r}: expected NAME=PATH")
        glbs.append((name, path))
    result = judge(args.case, glbs, args.out, args.target_faces, args.samples,
                   args.texture_samples, args.view_size, args.seed, not args.no_views,
                   args.visible_views, args.visible_resolution)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
