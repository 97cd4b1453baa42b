"""sparse3d_engine.trellis2.to_glb: the original's arguments in, a GlbMesh out whose export()
writes a GLB; the input conversions (NumPy, torch where installed, voxel_size or grid_size,
slices as the layout) and the errors, each naming what is wrong."""
import math
import os

import numpy as np
import pytest

import sparse3d_engine as s3d
from sparse3d_engine.trellis2 import GlbMesh, to_glb

LAYOUT = {"base_color": slice(0, 3), "metallic": slice(3, 4), "roughness": slice(4, 5),
          "alpha": slice(5, 6)}
AABB = [[-0.5, -0.5, -0.5], [0.5, 0.5, 0.5]]
RES = 33


def sphere(rings=21, segs=31, r=0.3):
    """An odd-sized UV sphere, and voxels of a RES^3 grid within two voxels of it carrying a
    smooth colour field (what a decoder would hand over, near enough for the contract)."""
    th = np.linspace(0, math.pi, rings + 1)[:, None]
    ph = np.linspace(0, 2 * math.pi, segs, endpoint=False)[None, :]
    v = np.stack([r * np.sin(th) * np.cos(ph), r * np.sin(th) * np.sin(ph),
                  r * np.cos(th) + 0 * ph], -1).reshape(-1, 3).astype(np.float32)
    f = []
    for i in range(rings):
        for k in range(segs):
            a, b = i * segs + k, i * segs + (k + 1) % segs
            f += [[a, a + segs, b], [b, a + segs, b + segs]]
    f = np.array(f, dtype=np.int32)
    g = np.stack(np.meshgrid(*[np.arange(RES)] * 3, indexing="ij"), -1).reshape(-1, 3)
    centre = (g + 0.5) / RES - 0.5
    near = np.abs(np.linalg.norm(centre, axis=1) - r) < 2.0 / RES
    coords = g[near].astype(np.int32)
    c = centre[near]
    attrs = np.concatenate([0.5 + c, np.full((len(c), 1), 0.25), np.full((len(c), 1), 0.75),
                            np.ones((len(c), 1))], 1).astype(np.float32)
    return v, f, attrs, coords


def test_to_glb_takes_the_originals_arguments_and_exports(tmp_path):
    v, f, attrs, coords = sphere()
    glb = to_glb(vertices=v, faces=f, attr_volume=attrs, coords=coords, attr_layout=LAYOUT,
                 aabb=AABB, grid_size=RES, decimation_target=700, texture_size=65, remesh=False)
    assert isinstance(glb, GlbMesh)
    assert 0 < glb.faces.shape[0] <= 700
    assert glb.base_color_texture.shape == (65, 65, 4)
    assert glb.metallic_roughness_texture.shape == (65, 65, 3)
    assert set(glb.stage_seconds()) >= {"fill holes", "UV atlas", "bake textures"}
    # Metallic 0.25 and roughness 0.75 everywhere: every texel, filled ones too.
    mr = glb.metallic_roughness_texture
    assert (mr[..., 0] == 0).all() and (abs(mr[..., 1].astype(int) - 191) <= 1).all()
    assert (abs(mr[..., 2].astype(int) - 63) <= 1).all()
    for webp in (True, False):
        out = tmp_path / ("a_webp.glb" if webp else "a_png.glb")
        glb.export(str(out), extension_webp=webp)
        data = out.read_bytes()
        assert data[:4] == b"glTF"
        assert (b"EXT_texture_webp" in data) == webp
    # Lossless WebP: the same extension, more bytes than lossy; refused for PNG and non-bools.
    lossy = (tmp_path / "a_webp.glb").read_bytes()
    glb.export(str(tmp_path / "a_lossless.glb"), extension_webp=True, lossless=True)
    lossless = (tmp_path / "a_lossless.glb").read_bytes()
    assert b"EXT_texture_webp" in lossless and lossless != lossy
    with pytest.raises(s3d.Error, match="lossless=True is for WebP"):
        glb.export(str(tmp_path / "b.glb"), lossless=True)
    with pytest.raises(s3d.Error, match="lossless must be True or False"):
        glb.export(str(tmp_path / "b.glb"), extension_webp=True, lossless=1)


def test_voxel_size_gives_the_same_grid_as_grid_size():
    v, f, attrs, coords = sphere()
    kw = dict(vertices=v, faces=f, attr_volume=attrs, coords=coords, attr_layout=LAYOUT,
              aabb=AABB, decimation_target=400, texture_size=32, use_gpu=False)
    a = to_glb(grid_size=RES, **kw)
    b = to_glb(voxel_size=1.0 / RES, **kw)
    assert np.array_equal(a.base_color_texture, b.base_color_texture)


def test_torch_tensors_are_taken_as_they_are():
    torch = pytest.importorskip("torch")
    v, f, attrs, coords = sphere()
    kw = dict(attr_layout=LAYOUT, aabb=torch.tensor(AABB), grid_size=RES,
              decimation_target=400, texture_size=32, use_gpu=False)
    a = to_glb(torch.from_numpy(v), torch.from_numpy(f), torch.from_numpy(attrs).half(),
               torch.from_numpy(coords).long(), **kw)
    b = to_glb(v, f, attrs.astype(np.float16).astype(np.float32), coords, **kw)
    assert np.array_equal(a.base_color_texture, b.base_color_texture)


@pytest.mark.parametrize("change, needle", [
    (dict(decimation_target=0), "decimation_target"),
    (dict(texture_size=0), "texture_size"),
    (dict(attr_layout={"base_color": slice(0, 3)}), "metallic"),
    (dict(attr_layout=dict(LAYOUT, alpha=slice(6, 7))), "alpha"),
    (dict(grid_size=None), "voxel_size or grid_size"),
    (dict(aabb=[0, 1]), "aabb"),
    (dict(faces=np.array([[0, 1, 99999]], dtype=np.int32)), "outside"),
    (dict(vertices=np.full((5, 3), np.nan, dtype=np.float32)), "non-finite"),
    (dict(coords=np.zeros((3, 3), dtype=np.int32)), "rows"),
    (dict(faces=np.zeros((4, 3), dtype=np.float32)), "integers"),
])
def test_bad_input_is_one_error_naming_it(change, needle):
    v, f, attrs, coords = sphere()
    kw = dict(vertices=v, faces=f, attr_volume=attrs, coords=coords, attr_layout=LAYOUT,
              aabb=AABB, grid_size=RES, decimation_target=400, texture_size=32)
    kw.update(change)
    with pytest.raises(s3d.Error, match=needle):
        to_glb(**kw)


def test_export_to_a_folder_is_refused_and_leaves_nothing(tmp_path):
    v, f, attrs, coords = sphere()
    glb = to_glb(v, f, attrs, coords, LAYOUT, AABB, grid_size=RES, decimation_target=300,
                 texture_size=16)
    (tmp_path / "taken.glb").mkdir()
    with pytest.raises(s3d.Error):
        glb.export(str(tmp_path / "taken.glb"))
    assert sorted(os.listdir(tmp_path)) == ["taken.glb"]


def sphere_to_glb_args():
    """to_glb's keyword arguments for the test sphere at a budget of 900 faces."""
    v, f, attrs, coords = sphere()
    return dict(vertices=v, faces=f, attr_volume=attrs, coords=coords, attr_layout=LAYOUT,
                aabb=AABB, grid_size=RES, decimation_target=900, texture_size=64)


def test_atlas_keyword_picks_the_method_and_refuses_others():
    args = sphere_to_glb_args()
    planar = to_glb(**args)
    xatlas = to_glb(**args, atlas="xatlas")
    assert planar.faces.shape == xatlas.faces.shape  # the same mesh, other UVs
    assert not np.array_equal(planar.uvs, xatlas.uvs)
    conformal = to_glb(**args, atlas="conformal")
    assert conformal.faces.shape == planar.faces.shape
    assert conformal.uvs.min() >= 0 and conformal.uvs.max() <= 1
    with pytest.raises(s3d.Error, match="atlas must be 'planar', 'conformal' or 'xatlas'"):
        to_glb(**args, atlas="lscm")


def test_simplifier_keyword_picks_the_collapse_and_refuses_others():
    args = sphere_to_glb_args()
    shaped = to_glb(**args)
    reference = to_glb(**args, simplifier="meshoptimizer")
    assert shaped.faces.shape[0] <= 900 and reference.faces.shape[0] <= 900
    assert not np.array_equal(shaped.faces, reference.faces)  # another collapse ran
    assert np.array_equal(to_glb(**args, simplifier="shaped").faces, shaped.faces)
    with pytest.raises(s3d.Error, match="simplifier must be 'shaped' or 'meshoptimizer'"):
        to_glb(**args, simplifier="vcg")


def test_remesh_drop_cavities_keeps_only_the_outer_shell():
    # The test sphere is a solid: its remesh has a shell inside it too, which the keyword drops.
    v, f, attrs, coords = sphere()
    inside = (coords < 32).all(1)  # the remesh wants a grid that halves to 32: 32, not RES
    args = dict(vertices=v, faces=f, attr_volume=attrs[inside], coords=coords[inside],
                attr_layout=LAYOUT, aabb=AABB, grid_size=32, decimation_target=900,
                texture_size=64, remesh=True, remesh_project=0)

    def radii(glb):
        p = np.asarray(glb.vertices, dtype=np.float64)
        return np.linalg.norm(p - 0.5 * (p.min(0) + p.max(0)), axis=1)

    kept = radii(to_glb(**args))
    dropped = radii(to_glb(**args, remesh_drop_cavities=True))
    assert (kept < dropped.min()).sum() > len(kept) // 4  # the inner shell, kept by default
    assert dropped.min() > 0.8 * dropped.max()


def test_accelerate_export_replaces_o_voxels_to_glb_and_restore_puts_it_back(monkeypatch):
    import sys
    import types

    from sparse3d_engine.trellis2 import accelerate

    def original(*args, **kwargs):
        return "the original"

    package = types.ModuleType("o_voxel")
    postprocess = types.ModuleType("o_voxel.postprocess")
    postprocess.to_glb = original
    package.postprocess = postprocess
    monkeypatch.setitem(sys.modules, "o_voxel", package)
    monkeypatch.setitem(sys.modules, "o_voxel.postprocess", postprocess)

    class Pipeline:
        models = {}

    acc = accelerate(Pipeline(), models=[], samplers=[], export=True)
    assert postprocess.to_glb is to_glb
    assert "o_voxel.postprocess.to_glb: sparse3d's export" in acc.report()
    acc.restore()
    assert postprocess.to_glb is original
    # Without o_voxel the flag is said to have done nothing, and nothing fails.
    monkeypatch.setitem(sys.modules, "o_voxel.postprocess", None)
    acc = accelerate(Pipeline(), models=[], samplers=[], export=True)
    assert "to_glb" in acc.skipped and "does not import" in acc.skipped["to_glb"]
    with pytest.raises(s3d.Error, match="export"):
        accelerate(Pipeline(), models=[], samplers=[], export="yes")


@pytest.mark.skipif(not os.environ.get("SPARSE3D_CLI"), reason="SPARSE3D_CLI (the C++ CLI) not set")
def test_command_line_export_takes_either_atlas(tmp_path):
    import subprocess
    cli = os.environ["SPARSE3D_CLI"]
    case = tmp_path / "torus.safetensors"
    made = subprocess.run([cli, "make-glb-input", "--procedural", "torus", "--resolution", "32",
                           "--out", str(case)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    for atlas in ("planar", "xatlas"):
        out = tmp_path / f"{atlas}.glb"
        run = subprocess.run([cli, "export-glb", "--input", str(case), "--out", str(out),
                              "--decimation-target", "2001", "--texture-size", "97", "--remesh",
                              "--atlas", atlas, "--cpu"], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        assert out.read_bytes()[:4] == b"glTF"
        assert "remesh" in run.stdout and "simplify" in run.stdout and "UV atlas" in run.stdout
    bad = subprocess.run([cli, "export-glb", "--input", str(case), "--out", str(tmp_path / "x.glb"),
                          "--atlas", "lscm"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--atlas" in bad.stderr
    assert not (tmp_path / "x.glb").exists()
