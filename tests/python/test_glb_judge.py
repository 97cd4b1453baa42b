"""The GLB judge (tools/glb_judge) against a synthetic case whose answers are known: an
icosphere inside a band of voxels holding a linear attribute field, a correct textured GLB of
it written by trimesh, and broken GLBs (shuffled UVs, a vertex moved far away, an index out of
range, WebP bytes declared PNG, an undeclared extension, wrong POSITION bounds, unfilled seam
texels), each of which a metric or the structure check must catch. The judge's building blocks
are checked against brute-force references written here."""
import json
import os
import struct
import sys

import numpy as np
import pytest

trimesh = pytest.importorskip("trimesh")
pytest.importorskip("scipy")
pytest.importorskip("pygltflib")
PIL_Image = pytest.importorskip("PIL.Image")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "glb_judge"))
import check_glb  # noqa: E402
import judge  # noqa: E402
import meshops  # noqa: E402
import safetensors_lite  # noqa: E402

GRID = 48
RADIUS = 0.33
CELL, MARGIN = 22, 2  # texels per atlas cell, and the gap between a triangle and its cell edge


def field(p):
    """The case's attributes at input-axes points: linear, so trilinear sampling of voxel
    centres reproduces it exactly wherever all eight neighbours are present."""
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    return np.stack([0.5 + 0.8 * x, 0.5 + 0.8 * y, 0.5 - 0.8 * z, 0.5 + 0.6 * y,
                     0.5 - 0.6 * x + 0.3 * z, np.ones_like(x)], axis=1)


def to_gltf(p):
    return np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("glb_judge")
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=RADIUS)
    v = np.asarray(sphere.vertices, dtype=np.float32)
    f = np.asarray(sphere.faces, dtype=np.int32)
    # Voxels within 3.5 voxels of the sphere: every surface point has all 8 neighbours.
    ijk = np.stack(np.meshgrid(*[np.arange(GRID)] * 3, indexing="ij"), -1).reshape(-1, 3)
    centres = (ijk + 0.5) / GRID - 0.5
    keep = np.abs(np.linalg.norm(centres, axis=1) - RADIUS) < 3.5 / GRID
    coords = ijk[keep].astype(np.int32)
    attrs = field(centres[keep]).astype(np.float32)
    case = str(root / "sphere.safetensors")
    safetensors_lite.write(case, {"vertices": v, "faces": f, "coords": coords, "attrs": attrs}, {
        "format": "sparse3d-glb-input/1", "aabb": "[[-0.5,-0.5,-0.5],[0.5,0.5,0.5]]",
        "grid_size": f"[{GRID},{GRID},{GRID}]",
        "attr_layout": '{"base_color":[0,3],"metallic":[3,4],"roughness":[4,5],"alpha":[5,6]}',
        "source": "test icosphere"})
    return {"root": root, "case": case, "v": v.astype(np.float64), "f": f.astype(np.int64)}


def atlas(v, f):
    """A per-face atlas: face i gets cell (i % n, i // n) of an n x n grid of CELL-texel cells,
    its corners at (MARGIN, MARGIN), (CELL - MARGIN, MARGIN), (MARGIN, CELL - MARGIN) inside.
    Every texel of a cell holds the field at the face's plane point of the texel's centre
    (barycentric coordinates extrapolated), so bilinear reads inside a face are exact.
    Returns corner positions [F, 3, 3] (input axes), glTF UVs [F, 3, 2], base colour RGBA
    and metallic-roughness RGB images, and the per-texel 'inside its triangle' mask."""
    n = int(np.ceil(np.sqrt(len(f))))
    size = n * CELL
    corners = np.array([[MARGIN, MARGIN], [CELL - MARGIN, MARGIN], [MARGIN, CELL - MARGIN]],
                       dtype=np.float64)
    cell = np.stack([np.arange(len(f)) % n, np.arange(len(f)) // n], 1) * CELL
    uv = (cell[:, None, :] + corners[None]) / size
    j, i = np.mgrid[0:size, 0:size]
    face = (j // CELL) * n + (i // CELL)
    lx, ly = i % CELL + 0.5, j % CELL + 0.5
    b = (lx - MARGIN) / (CELL - 2 * MARGIN)
    c = (ly - MARGIN) / (CELL - 2 * MARGIN)
    tri = v[f]
    used = face < len(f)
    fid = np.where(used, face, 0)
    p = ((1 - b - c)[..., None] * tri[fid, 0] + b[..., None] * tri[fid, 1]
         + c[..., None] * tri[fid, 2])
    values = field(p.reshape(-1, 3)).reshape(size, size, 6)
    values[~used] = 0.5
    inside = used & (b >= 0) & (c >= 0) & (b + c <= 1)
    rgba = np.round(np.clip(values[..., [0, 1, 2, 5]], 0, 1) * 255).astype(np.uint8)
    mr = np.zeros((size, size, 3), dtype=np.uint8)
    mr[..., 1] = np.round(np.clip(values[..., 4], 0, 1) * 255)
    mr[..., 2] = np.round(np.clip(values[..., 3], 0, 1) * 255)
    return tri, uv, rgba, mr, inside


def write_glb(path, tri, uv, rgba, mr, webp=False):
    """Unwelded faces (3 vertices each) in glTF axes, written by trimesh. trimesh keeps UVs
    with v = 0 at the bottom and flips them on export, hence 1 - v here."""
    pos = to_gltf(tri.reshape(-1, 3))
    faces = np.arange(len(pos)).reshape(-1, 3)
    uv_flat = uv.reshape(-1, 2)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=PIL_Image.fromarray(rgba),
        metallicRoughnessTexture=PIL_Image.fromarray(mr),
        baseColorFactor=[255, 255, 255, 255], metallicFactor=1.0, roughnessFactor=1.0,
        alphaMode="OPAQUE", doubleSided=True)
    mesh = trimesh.Trimesh(pos, faces, process=False, visual=trimesh.visual.TextureVisuals(
        uv=np.stack([uv_flat[:, 0], 1 - uv_flat[:, 1]], 1), material=material))
    with open(path, "wb") as fh:
        fh.write(mesh.export(file_type="glb", extension_webp=webp))
    return path


def split(path):
    """(json document, bin bytes) of a GLB, parsed here independently of the judge."""
    with open(path, "rb") as fh:
        blob = fh.read()
    n = struct.unpack_from("<I", blob, 12)[0]
    doc = json.loads(blob[20:20 + n])
    m = struct.unpack_from("<I", blob, 20 + n)[0]
    return doc, bytearray(blob[28 + n:28 + n + m])


def join(path, doc, binary):
    text = json.dumps(doc).encode()
    text += b" " * (-len(text) % 4)
    binary = bytes(binary) + b"\0" * (-len(binary) % 4)
    total = 12 + 8 + len(text) + 8 + len(binary)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<III", 0x46546C67, 2, total))
        fh.write(struct.pack("<II", len(text), 0x4E4F534A) + text)
        fh.write(struct.pack("<II", len(binary), 0x004E4942) + binary)
    return path


def run_judge(work, name, path, **kw):
    opts = dict(samples=40_000, texture_samples=20_000, view_size=96, render=False)
    opts.update(kw)
    out = str(work["root"] / f"out_{name}")
    return judge.judge(work["case"], [(name, path)], out, **opts)["glbs"][name]


@pytest.fixture(scope="module")
def good(work):
    tri, uv, rgba, mr, inside = atlas(work["v"], work["f"])
    path = write_glb(str(work["root"] / "good.glb"), tri, uv, rgba, mr)
    return {"path": path, "tri": tri, "uv": uv, "rgba": rgba, "mr": mr, "inside": inside}


def test_correct_glb_scores_near_zero(work, good):
    out = str(work["root"] / "out_views")
    result = judge.judge(work["case"], [("good", good["path"])], out, target_faces=2000,
                         samples=40_000, texture_samples=20_000, view_size=96)
    r = result["glbs"]["good"]
    assert r["check"]["ok"], r["check"]["problems"]
    assert r["faces"] == len(work["f"]) and r["faces_within_target"] is True
    assert r["chamfer"] < 1e-6 and r["hausdorff"] < 1e-5
    assert r["normal_consistency"] > 0.995
    for channel in ("r", "g", "b", "metallic", "roughness"):
        assert r["texture_mae"][channel] < 0.004, (channel, r["texture_mae"])
    assert r["texture_samples"] == 20_000 and r["texture_samples_without_uv"] == 0
    assert r["seam_band_texels"] > 0 and r["seam_unfilled_texels"] == 0
    # Triangle area over cell area, over the used share of the grid.
    n = int(np.ceil(np.sqrt(len(work["f"]))))
    expect = 0.5 * (CELL - 2 * MARGIN) ** 2 * len(work["f"]) / (n * CELL) ** 2
    assert abs(r["atlas_utilisation"] - expect) < 0.02 * expect
    assert r["charts"] == len(work["f"]) and r["charts_welded"] == len(work["f"])
    assert 1.0 <= r["stretch_mean"] < 1.2 and r["stretch_p95"] < 1.4
    assert r["uv_collapsed_faces"] == 0
    views = PIL_Image.open(result["views"])
    assert views.size == (3 * 96, 2 * (96 + 22))
    # The input row and the GLB row show the same object in the same colours.
    px = np.asarray(views, dtype=np.float64)
    a, b = px[22:22 + 96], px[2 * 22 + 96:]
    assert np.mean(np.abs(a - b)) < 12
    with open(os.path.join(out, "judge.json")) as fh:
        assert json.load(fh)["glbs"]["good"]["faces"] == len(work["f"])


def test_visible_figures_are_reported_and_as_good_as_the_whole(work, good):
    # A correct GLB of the case: over whatever share of it is seen from outside, the texture
    # and distance figures stay as near zero as over the whole surface.
    result = judge.judge(work["case"], [("good", good["path"])], str(work["root"] / "out_vis"),
                         samples=20_000, texture_samples=10_000, render=False,
                         visible_views=16, visible_resolution=256)
    r = result["glbs"]["good"]
    v = r["visible"]
    assert v["views"] == 16 and v["resolution"] == 256 and v["seconds"] >= 0
    assert 0.0 < v["glb_area_share"] <= 1.0 and 0.0 < v["input_sample_share"] <= 1.0
    assert 0 < v["texture_samples"] <= r["texture_samples"]
    for channel in ("r", "g", "b"):
        assert v["texture_mae"][channel] < 0.004
    assert v["chamfer"] < 1e-6
    assert "visible area share" in judge.table(result)


def test_target_faces_exceeded(work, good):
    r = run_judge(work, "target", good["path"], target_faces=100)
    assert r["faces_within_target"] is False


def test_shuffled_uvs_are_caught(work, good):
    rng = np.random.default_rng(3)
    uv = good["uv"].reshape(-1, 2)[rng.permutation(good["uv"].size // 2)].reshape(-1, 3, 2)
    path = write_glb(str(work["root"] / "shuffled.glb"), good["tri"], uv, good["rgba"],
                     good["mr"])
    r = run_judge(work, "shuffled", path)
    assert r["check"]["ok"]
    assert r["chamfer"] < 1e-6  # the geometry is untouched
    assert min(r["texture_mae"][c] for c in ("r", "g", "b")) > 0.05, r["texture_mae"]
    assert r["stretch_p95"] > 5


def test_moved_vertex_is_caught(work, good):
    tri = good["tri"].copy()
    tri[17, 1] += [0.0, 0.0, 2.0]
    path = write_glb(str(work["root"] / "moved.glb"), tri, good["uv"], good["rgba"],
                     good["mr"])
    r = run_judge(work, "moved", path)
    assert r["check"]["ok"], r["check"]["problems"]
    assert r["hausdorff"] > 1.0  # about 1.7 R above the sphere, over a diagonal of 2 sqrt(3) R
    assert r["chamfer"] > 1e-4


def test_index_out_of_range_is_caught(work, good):
    doc, binary = split(good["path"])
    prim = doc["meshes"][0]["primitives"][0]
    acc = doc["accessors"][prim["indices"]]
    nverts = doc["accessors"][prim["attributes"]["POSITION"]]["count"]
    assert acc["componentType"] == 5125
    view = doc["bufferViews"][acc["bufferView"]]
    at = view.get("byteOffset", 0) + acc.get("byteOffset", 0) + 4 * 5
    struct.pack_into("<I", binary, at, nverts + 7)
    path = join(str(work["root"] / "badindex.glb"), doc, binary)
    result = check_glb.check_glb(path, loaders=False)
    assert not result["ok"]
    assert any(f"index {nverts + 7} is not below the vertex count {nverts}" in p
               for p in result["problems"]), result["problems"]
    r = run_judge(work, "badindex", path)
    assert "error" in r and "not below the vertex count" in r["error"]


def test_webp_declared_png_is_caught(work, good):
    path = write_glb(str(work["root"] / "webp.glb"), good["tri"], good["uv"], good["rgba"],
                     good["mr"], webp=True)
    ok = check_glb.check_glb(path)
    assert ok["ok"], ok["problems"]
    assert "EXT_texture_webp" in ok["extensions_used"]
    doc, binary = split(path)
    doc["images"][0]["mimeType"] = "image/png"
    bad = check_glb.check_glb(join(str(work["root"] / "webp_as_png.glb"), doc, binary),
                              loaders=False)
    assert not bad["ok"]
    assert any("mimeType image/png but the bytes are image/webp" in p for p in bad["problems"])


def test_undeclared_webp_extension_is_caught(work, good):
    path = write_glb(str(work["root"] / "webp2.glb"), good["tri"], good["uv"], good["rgba"],
                     good["mr"], webp=True)
    doc, binary = split(path)
    doc.pop("extensionsRequired")
    r = check_glb.check_glb(join(str(work["root"] / "webp_noreq.glb"), doc, binary), False)
    assert any("extensionsRequired lacks EXT_texture_webp" in p for p in r["problems"])
    doc.pop("extensionsUsed")
    r = check_glb.check_glb(join(str(work["root"] / "webp_noext.glb"), doc, binary), False)
    assert any("extensionsUsed lacks it" in p for p in r["problems"])


def test_wrong_position_bounds_and_container_are_caught(work, good):
    doc, binary = split(good["path"])
    acc = doc["accessors"][doc["meshes"][0]["primitives"][0]["attributes"]["POSITION"]]
    acc["max"] = [acc["max"][0] + 1e-3, acc["max"][1], acc["max"][2]]
    r = check_glb.check_glb(join(str(work["root"] / "bounds.glb"), doc, binary), False)
    assert any("POSITION max" in p for p in r["problems"]), r["problems"]
    del acc["min"]
    r = check_glb.check_glb(join(str(work["root"] / "nomin.glb"), doc, binary), False)
    assert any("lacks min/max" in p for p in r["problems"]), r["problems"]
    with open(good["path"], "rb") as fh:
        blob = bytearray(fh.read())
    struct.pack_into("<I", blob, 4, 1)  # container version 1
    path = str(work["root"] / "v1.glb")
    with open(path, "wb") as fh:
        fh.write(blob[:-2])  # and two bytes short
    r = check_glb.check_glb(path, loaders=False)
    assert any("version is 1" in p for p in r["problems"])
    assert any("!= file size" in p for p in r["problems"])
    assert any("runs past the end" in p for p in r["problems"])
    clean = check_glb.check_glb(good["path"], loaders=False)
    assert clean["ok"] and clean["faces"] == len(work["f"])


def test_unfilled_seam_texels_are_caught(work, good):
    rgba = good["rgba"].copy()
    rgba[~good["inside"], 3] = 0
    path = write_glb(str(work["root"] / "unfilled.glb"), good["tri"], good["uv"], rgba,
                     good["mr"])
    r = run_judge(work, "unfilled", path)
    assert r["seam_unfilled_fraction"] > 0.95, r
    # Texture reads inside faces use RGB only, so the colour error stays small.
    assert r["texture_mae"]["r"] < 0.004


def test_unfilled_rule_without_alpha_counts_black_beside_colour_only(work, good):
    # The base colour as RGB (no alpha channel): black beyond a texel and a half of the faces
    # (the judge's covered texels keep their colour) is unfilled...
    from scipy.ndimage import distance_transform_edt
    rgb = good["rgba"][..., :3].copy()
    assert rgb[good["inside"]].max(axis=1).min() >= judge.UNFILLED_NEIGHBOUR_LEVEL
    far = distance_transform_edt(~good["inside"]) > 1.5
    rgb[far] = 0
    r = run_judge(work, "unfilled_rgb", write_glb(str(work["root"] / "unfilled_rgb.glb"),
                                                  good["tri"], good["uv"], rgb, good["mr"]))
    assert r["seam_unfilled_texels"] > 0.3 * r["seam_band_texels"], (
        r["seam_unfilled_rule"], r["seam_unfilled_texels"], r["seam_band_texels"])
    # ...but black filled beside a black surface is that surface's colour, not a hole.
    black = np.zeros_like(rgb)
    r = run_judge(work, "black_rgb", write_glb(str(work["root"] / "black_rgb.glb"),
                                               good["tri"], good["uv"], black, good["mr"]))
    assert r["seam_band_texels"] > 0 and r["seam_unfilled_texels"] == 0, r


def test_volume_sampling_matches_brute_force():
    rng = np.random.default_rng(5)
    grid = np.array([7, 5, 6])
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in grid], indexing="ij"), -1).reshape(-1, 3)
    coords = ijk[rng.random(len(ijk)) < 0.55]
    attrs = rng.random((len(coords), 4))
    aabb = np.array([[-0.3, -0.2, -0.1], [0.4, 0.3, 0.5]])
    vol = meshops.SparseVolume(coords, attrs, grid, aabb)
    size = (aabb[1] - aabb[0]) / grid
    pts = aabb[0] + rng.uniform(-0.1, 1.1, size=(300, 3)) * (aabb[1] - aabb[0])
    table = {tuple(c): a for c, a in zip(coords.tolist(), attrs)}
    got = vol.sample(pts)
    zero_rows = 0
    for p, row in zip(pts, got):
        g = (p - aabb[0]) / size
        acc, wsum = np.zeros(4), 0.0
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    c = (int(np.floor(g[0] - 0.5)) + dx, int(np.floor(g[1] - 0.5)) + dy,
                         int(np.floor(g[2] - 0.5)) + dz)
                    w = 1.0
                    for k in range(3):
                        w *= max(0.0, 1 - abs(g[k] - (c[k] + 0.5)))
                    if c in table and w > 0:
                        acc += w * table[c]
                        wsum += w
        want = acc / wsum if wsum > 0 else np.zeros(4)
        zero_rows += wsum == 0
        np.testing.assert_allclose(row, want, atol=1e-12)
    assert 0 < zero_rows < 100  # both kinds of point were exercised


def test_closest_point_matches_brute_force():
    rng = np.random.default_rng(2)
    a, b, c = rng.normal(size=(3, 150, 3))
    b[:10] = a[:10]                      # a segment
    c[10:20] = 2 * b[10:20] - a[10:20]   # collinear corners
    p = 1.5 * rng.normal(size=(150, 3))
    bary = meshops.closest_on_triangles(p, a, b, c)
    assert np.all(bary >= -1e-12) and np.allclose(bary.sum(1), 1)
    d = np.linalg.norm(bary[:, :1] * a + bary[:, 1:2] * b + bary[:, 2:] * c - p, axis=1)
    s, t = np.meshgrid(np.linspace(0, 1, 121), np.linspace(0, 1, 121))
    keep = s + t <= 1
    s, t = s[keep], t[keep]
    for i in range(len(p)):
        pts = a[i] + s[:, None] * (b[i] - a[i]) + t[:, None] * (c[i] - a[i])
        brute = np.linalg.norm(pts - p[i], axis=1).min()
        assert d[i] <= brute + 1e-12
        assert d[i] >= brute - 0.05 * np.linalg.norm(np.c_[b[i] - a[i], c[i] - a[i]], axis=0).max()


def test_exact_distances_and_their_maximum_match_brute_force():
    # 37 long thin slivers in z = 0 (little area, so few samples, and centroids far from their
    # tips) under 300 small triangles in z = 1 that take the samples: a point just above a
    # sliver's tip gets an answer near 1 from the query, the exact distance is near 0.05.
    rng = np.random.default_rng(4)
    tips = rng.uniform(-1, 1, size=(37, 2))
    sliver = [np.array([[x, y, 0], [x + 10, y, 0], [x + 10, y + 1e-3, 0]]) for x, y in tips]
    small = [np.c_[c + 0.05 * rng.normal(size=(3, 2)), np.ones(3)]
             for c in rng.uniform(-2, 12, size=(300, 2))]
    tri = np.array(sliver + small)
    v, f = tri.reshape(-1, 3), np.arange(3 * len(tri), dtype=np.int64).reshape(-1, 3)
    proj = meshops.Projector(v, f, 60, rng)
    q = np.r_[np.c_[tips + 0.01, np.full(37, 0.05)], rng.uniform(-1, 12, size=(64, 3))]
    d = proj.query(q)[3]
    brute = np.empty(len(q))
    for i in range(len(q)):
        bary = meshops.closest_on_triangles(np.repeat(q[i][None], len(f), 0), tri[:, 0],
                                            tri[:, 1], tri[:, 2])
        brute[i] = np.linalg.norm(np.einsum("nk,nkd->nd", bary, tri) - q[i], axis=1).min()
    assert np.sum(d > brute + 0.1) >= 10, "the query seldom overshot: the test shows little"
    exact = proj.exact(q, d)
    assert np.allclose(exact, brute, rtol=0, atol=1e-12)
    # The slivers and the small triangles are radius classes of their own; a budget of a few
    # candidates cuts the points into many chunks: the same distances.
    assert len(proj._radius_classes()) >= 2
    assert np.array_equal(proj.exact(q, d, budget=5), exact)
    assert proj.exact_max(q, d, batch=7) == pytest.approx(brute.max(), abs=1e-12)


def test_coverage_matches_brute_force():
    rng = np.random.default_rng(4)
    w, h = 37, 29
    tri = rng.uniform(-5, 42, size=(25, 3, 2))
    tri[0] = [[1.0, 1.0], [36.0, 2.0], [3.0, 28.0]]  # large, and batches of 7 rows below
    got = meshops.rasterize_coverage(tri, w, h, batch=7)
    want = np.zeros((h, w), dtype=bool)
    for t in tri:
        for y in range(h):
            for x in range(w):
                px, py = x + 0.5, y + 0.5
                e = [(t[(k + 1) % 3, 0] - t[k, 0]) * (py - t[k, 1])
                     - (t[(k + 1) % 3, 1] - t[k, 1]) * (px - t[k, 0]) for k in range(3)]
                want[y, x] |= all(v >= 0 for v in e) or all(v <= 0 for v in e)
    assert want.sum() > 100
    np.testing.assert_array_equal(got, want)


def test_cli_writes_json_and_table(work, good):
    import subprocess
    out = str(work["root"] / "cli")
    script = os.path.join(os.path.dirname(judge.__file__), "judge.py")
    run = subprocess.run([sys.executable, script, "--case", work["case"], "--glb",
                          f"ours={good['path']}", "--glb", "twice=" + good["path"],
                          "--target-faces", "5000", "--out", out, "--samples", "20000",
                          "--texture-samples", "5000", "--no-views"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "ours" in run.stdout and "twice" in run.stdout and "hausdorff" in run.stdout
    with open(os.path.join(out, "judge.json")) as fh:
        result = json.load(fh)
    assert set(result["glbs"]) == {"ours", "twice"}
    assert result["glbs"]["twice"]["faces_within_target"] is True
    bad = subprocess.run([sys.executable, script, "--case", work["case"], "--glb", "nameless",
                          "--out", out], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "NAME=PATH" in bad.stderr


def test_procedural_field_properties():
    import sources
    rng = np.random.default_rng(8)
    ijk = rng.integers(-5, 5, size=(400, 3))
    centres = (ijk + 0.5) * 0.1  # cell centres, away from the checker's boundaries
    pbr = sources.procedural_pbr(centres)
    for axis in range(3):
        step = centres.copy()
        step[:, axis] += 0.1
        assert np.all(sources.procedural_pbr(step)[:, 3] == 1 - pbr[:, 3])
    assert set(np.unique(pbr[:, 3]).tolist()) == {0.0, 1.0}
    p = rng.uniform(-0.5, 0.5, size=(2000, 3))
    pbr = sources.procedural_pbr(p)
    assert np.all(pbr[:, 5] == 1) and np.all((pbr[:, :3] >= 0.15) & (pbr[:, :3] <= 0.85))
    moved = p + [0.3, -0.2, 0.0]  # roughness depends on the height (z) alone, rising with it
    np.testing.assert_allclose(sources.procedural_pbr(moved)[:, 4], pbr[:, 4])
    up = p + [0.0, 0.0, 0.01]
    assert np.all(sources.procedural_pbr(up)[:, 4] >= pbr[:, 4])
    near = p + rng.normal(scale=1e-4, size=p.shape)  # the base colour is smooth
    assert np.abs(sources.procedural_pbr(near)[:, :3] - pbr[:, :3]).max() < 1e-2


@pytest.mark.skipif(not os.path.exists("/usr/share/assimp/models/OBJ/spider.obj") or
                    not os.path.exists("/usr/share/glmark2/models/bunny.obj"),
                    reason="Debian's glmark2-data and assimp-testmodels are not installed")
def test_sources_from_debian_packages(tmp_path):
    import sources
    path = sources.write_source("bunny", str(tmp_path))
    tensors, meta = safetensors_lite.read(path)
    v, f, pbr = tensors["vertices"], tensors["faces"], tensors["pbr"]
    assert v.dtype == np.float32 and f.dtype == np.int32 and pbr.shape == (len(v), 6)
    extent = v.max(axis=0) - v.min(axis=0)
    assert abs(extent.max() - 0.9) < 1e-6
    np.testing.assert_allclose(v.max(axis=0) + v.min(axis=0), 0, atol=1e-6)
    assert f.min() == 0 and f.max() == len(v) - 1 and len(f) > 60000
    assert meta["package"] == "glmark2-data" and meta["licence"].startswith("GPL-3+")
    assert meta["base_color_from"] == "procedural"
    # The spider's base colours come from its JPEG textures, not from the procedural field.
    v, f, pbr, how = sources.load_source_with_info("spider")
    assert how == "texture"
    assert np.mean(np.abs(pbr[:, :3] - sources.procedural_pbr(v)[:, :3]).max(1) > 0.05) > 0.5
    # The cube's vertex colours are the file's: its first vertex is 0.48627 0.43137 0.47059.
    v, f, pbr, how = sources.load_source_with_info("vcube")
    assert how == "vertex colours"
    assert np.any(np.all(np.abs(pbr[:, :3] - [0.48627, 0.43137, 0.47059]) < 1.5 / 255, axis=1))
    with pytest.raises(sources.SourceUnavailable, match="no triangles|cannot read"):
        sources.load_source("pond")


def _box(lo, hi, subdivisions):
    box = trimesh.creation.box(bounds=np.array([lo, hi], dtype=np.float64))
    for _ in range(subdivisions):
        box = box.subdivide()
    return np.asarray(box.vertices), np.asarray(box.faces)


def test_visibility_tells_shells_and_openings_apart():
    import visibility
    ov, of = _box([-1, -1, -1], [1, 1, 1], 2)
    iv, inner = _box([-0.4, -0.3, -0.5], [0.5, 0.4, 0.3], 1)
    v = np.concatenate([ov, iv])
    f = np.concatenate([of, inner + len(ov)])
    seen, never = visibility.visible_faces(v, f, views=48, resolution=256, workers=1)
    assert seen[:len(of)].all() and not seen[len(of):].any() and not never.any()
    # Open the outer box's top: the inner box's top (and its sides, obliquely) come into view,
    # its bottom stays hidden; the outer box's inside is now seen too.
    keep = ov[of].mean(axis=1)[:, 2] < 0.99
    f = np.concatenate([of[keep], inner + len(ov)])
    seen2, _ = visibility.visible_faces(v, f, views=48, resolution=256, workers=2)
    inner_centres = iv[inner].mean(axis=1)
    assert seen2[int(keep.sum()):][inner_centres[:, 2] > 0.29].all()
    assert not seen2[int(keep.sum()):][inner_centres[:, 2] < -0.49].any()
    assert np.array_equal(seen2, visibility.visible_faces(v, f, views=48, resolution=256,
                                                          workers=1)[0])


def test_visibility_separates_a_surface_a_tenth_of_a_pixel_behind():
    import visibility
    # Two parallel squares, the second 1e-3 behind the first: only the first is seen from
    # its side, and from the other side only the second.
    sq = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.float64)
    v = np.concatenate([sq, sq + [0, 0, -1e-3]])
    f = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    seen, _ = visibility.visible_faces(v, f, views=2, resolution=128, workers=1,
                                        min_views=1)
    assert seen.all()  # directions +z and -z: each square seen from its own side
    v2 = np.concatenate([v, sq * 3 - [1, 1, 1e-2]])  # a large square below both
    f2 = np.concatenate([f, [[8, 9, 10], [8, 10, 11]]])
    seen2, _ = visibility.visible_faces(v2, f2, views=2, resolution=128, workers=1,
                                         min_views=1)
    assert seen2[:2].all() and not seen2[2:4].any() and seen2[4:].all()
