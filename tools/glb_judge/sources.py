"""Real meshes that nobody in this project wrote, as sources of GLB judge cases.

  python3 tools/glb_judge/sources.py --list
  python3 tools/glb_judge/sources.py --name bunny --out DIR      (writes DIR/bunny.safetensors)

The meshes come from Debian packages (install: apt-get install -y glmark2-data
assimp-testmodels assimp-utils): glmark2-data's models (the .3ds ones are converted to .obj by
the `assimp` command of assimp-utils, skipped with a message when it is missing) and
assimp-testmodels' test models. load_source(name) returns (vertices float32 [V, 3], faces int32
[F, 3], pbr float32 [V, 6]) where

  - the model is loaded with trimesh and every part of a scene is placed by its scene-graph
    transform and merged into one mesh (as trimesh.load(..., force='mesh') merges them, but
    keeping each part's own texture and colours, which that merge would pack or drop);
  - the axes are turned so that +Z is up (files whose up axis is +Y: input = (x, -z, y), the
    inverse of to_glb's swap, so the GLB shows the model as its file did; glmark2's horse and
    cat, whose assimp-converted files stand along -Z: input = (x, -y, -z));
  - it is normalised into [-0.5, 0.5]^3: the bounding box centred on the origin and its
    longest side scaled to 0.9;
  - pbr columns are base colour r, g, b (0:3), metallic (3), roughness (4), alpha (5), per
    vertex, in [0, 1]. Base colour: the texture at the vertex's UV (bilinear, OBJ convention
    v = 0 at the image's bottom row, wrapping) where the part has a texture image, else the
    vertex colours where it has them, else the procedural field below. Metallic and roughness
    always come from the procedural field, alpha is always 1.

Procedural field (p the normalised position, input axes, +Z up):
  base colour  c_k = 0.5 + 0.35 sin(2 pi * 2 (p . d_k) + phi_k) for k = r, g, b, with unit
               directions d_r ~ (1, 0.3, 0), d_g ~ (0, 1, 0.3), d_b ~ (0.3, 0, 1) and phases
               0, 2.1, 4.2: smooth bands, two per unit length;
  metallic     1 on the cells (i + j + k) odd of a checker of 0.1-unit cubes
               (i = floor(x / 0.1), ...), else 0;
  roughness    0.15 + 0.7 (z + 0.5): a gradient along the height;
  alpha        1.
The source file holds tensors vertices, faces, pbr and metadata format, name, package, file,
licence (from /usr/share/doc/<package>/copyright), pbr_layout, base_color_from."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glbfile  # noqa: E402
import meshops  # noqa: E402
import safetensors_lite  # noqa: E402

GLMARK = "/usr/share/glmark2/models"
ASSIMP = "/usr/share/assimp/models"
PBR_LAYOUT = '{"base_color":[0,3],"metallic":[3,4],"roughness":[4,5],"alpha":[5,6]}'

# name: (Debian package, file, up axis of the file, what it exercises)
CATALOGUE = {
    "bunny": ("glmark2-data", f"{GLMARK}/bunny.obj", "y", "70k-face closed scan"),
    "horse": ("glmark2-data", f"{GLMARK}/horse.3ds", "-z", "3DS via assimp; open seams"),
    "cat": ("glmark2-data", f"{GLMARK}/cat.3ds", "-z", "3DS via assimp"),
    "wuson": ("assimp-testmodels", f"{ASSIMP}/OBJ/WusonOBJ.obj", "y", "OBJ with UV seams"),
    "wuson_off": ("assimp-testmodels", f"{ASSIMP}/OFF/Wuson.off", "y", "the same, welded"),
    "spider": ("assimp-testmodels", f"{ASSIMP}/OBJ/spider.obj", "y",
               "4 parts with JPEG textures (SpiderTex.jpg, ...)"),
    "regr01": ("assimp-testmodels", f"{ASSIMP}/OBJ/regr01.obj", "z",
               "a house of 12 parts, thin walls"),
    "sphere_hole": ("assimp-testmodels", f"{ASSIMP}/STL/sphereWithHole.stl", "z",
                    "an open sphere (a hole)"),
    "vcube": ("assimp-testmodels", f"{ASSIMP}/OBJ/cube_with_vertexcolors.obj", "y",
              "12 faces with vertex colours"),
    "pond": ("assimp-testmodels", f"{ASSIMP}/PLY/pond.0.ply", "z",
             "a coloured point cloud: no faces, listed as unusable"),
}


class SourceUnavailable(RuntimeError):
    """The source cannot be loaded here (package or converter missing, no faces, ...)."""


def licence_line(package):
    """'<License> (<Copyright>)' of the 'Files: *' stanza of Debian's copyright file."""
    path = f"/usr/share/doc/{package}/copyright"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return f"unknown ({path} missing)"
    for stanza in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key].append(line.strip())
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = [value.strip()] if value.strip() else []
        if fields.get("Files") == ["*"] and "License" in fields:
            holders = "; ".join(" ".join(x.split()) for x in fields.get("Copyright", []) if x)
            return f"{fields['License'][0]} (Copyright: {holders}; {path}, Files: *)"
    return f"unknown (no 'Files: *' stanza in {path})"


def _converted(path):
    """An .obj made from a .3ds by assimp's command-line tool, cached in the temp folder."""
    tool = shutil.which("assimp")
    if tool is None:
        raise SourceUnavailable(f"{path}: needs the `assimp` command (apt-get install "
                                "assimp-utils) to convert it to .obj")
    cache = os.path.join(tempfile.gettempdir(), "glb_judge_assimp")
    os.makedirs(cache, exist_ok=True)
    out = os.path.join(cache, os.path.splitext(os.path.basename(path))[0] + ".obj")
    if not os.path.exists(out):
        run = subprocess.run([tool, "export", path, out], capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(out):
            raise SourceUnavailable(f"{path}: assimp export failed: {run.stderr.strip()}")
    return out


def _mtl_textures(obj_path):
    """material name -> path of its map_Kd image, read from the .mtl files the .obj names;
    Windows-style paths (.\\name.jpg) and case differences are resolved in the model's
    folder, which trimesh's own resolver misses."""
    folder = os.path.dirname(obj_path)
    listing = {name.lower(): name for name in os.listdir(folder)}
    out = {}
    with open(obj_path, errors="replace") as f:
        libs = [line.split(None, 1)[1].strip() for line in f if line.startswith("mtllib")]
    for lib in libs:
        mtl = os.path.join(folder, lib)
        if not os.path.exists(mtl):
            continue
        current = None
        with open(mtl, errors="replace") as f:
            for line in f:
                parts = line.strip().split(None, 1)
                if len(parts) < 2:
                    continue
                if parts[0] == "newmtl":
                    current = parts[1].strip()
                elif parts[0] == "map_Kd" and current is not None:
                    name = parts[1].strip().split()[-1].replace("\\", "/").split("/")[-1]
                    if name.lower() in listing:
                        out[current] = os.path.join(folder, listing[name.lower()])
    return out


def procedural_pbr(p):
    """The documented procedural field at normalised input-axes points p [n, 3]: [n, 6]."""
    p = np.asarray(p, dtype=np.float64)
    dirs = np.array([[1, 0.3, 0], [0, 1, 0.3], [0.3, 0, 1]], dtype=np.float64)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    phases = np.array([0.0, 2.1, 4.2])
    base = 0.5 + 0.35 * np.sin(2 * np.pi * 2 * (p @ dirs.T) + phases)
    cells = np.floor(p / 0.1).astype(np.int64).sum(axis=1)
    metallic = (cells % 2).astype(np.float64)
    roughness = np.clip(0.15 + 0.7 * (p[:, 2] + 0.5), 0.0, 1.0)
    return np.concatenate([base, metallic[:, None], roughness[:, None],
                           np.ones((len(p), 1))], axis=1)


def _base_colour(geom, textures):
    """(colours [V, 3] or None, what they came from) for one trimesh part."""
    from PIL import Image
    visual = geom.visual
    kind = getattr(visual, "kind", None)
    if kind == "texture" and getattr(visual, "uv", None) is not None:
        material = getattr(visual, "material", None)
        image = None
        name = getattr(material, "name", None)
        if name in textures:
            image = Image.open(textures[name])
        elif getattr(material, "image", None) is not None and min(material.image.size) >= 8:
            image = material.image  # trimesh's placeholder for a missing map is 2x2
        if image is not None:
            pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
            tex = glbfile.Texture(pixels, glbfile.REPEAT, glbfile.REPEAT, 0, False, None)
            uv = np.asarray(visual.uv, dtype=np.float64)
            return meshops.sample_texture(tex, np.stack([uv[:, 0], 1 - uv[:, 1]], 1)), "texture"
    if kind == "vertex":
        return np.asarray(visual.vertex_colors, dtype=np.float64)[:, :3] / 255.0, "vertex colours"
    return None, "procedural"


def _parts(path):
    """[(trimesh.Trimesh placed by its scene transform, texture map)] of a model file."""
    import trimesh
    textures = _mtl_textures(path) if path.lower().endswith(".obj") else {}
    try:
        loaded = trimesh.load(path)
    except Exception as e:  # noqa: BLE001 (a reader's failure makes the source unusable)
        raise SourceUnavailable(f"{path}: trimesh cannot read it ({e})") from e
    if isinstance(loaded, trimesh.Scene):
        parts = []
        for node in loaded.graph.nodes_geometry:
            transform, name = loaded.graph[node]
            geom = loaded.geometry[name]
            if isinstance(geom, trimesh.Trimesh) and len(geom.faces):
                geom = geom.copy()
                geom.apply_transform(transform)
                parts.append(geom)
    else:
        parts = [loaded] if isinstance(loaded, trimesh.Trimesh) and len(loaded.faces) else []
    if not parts:
        raise SourceUnavailable(f"{path}: no triangles (a point cloud or empty scene)")
    return parts, textures


def load_source(name):
    """(vertices float32 [V, 3], faces int32 [F, 3], pbr float32 [V, 6]) of a catalogue
    source, normalised as the module doc says."""
    v, f, pbr, _ = load_source_with_info(name)
    return v, f, pbr


def load_source_with_info(name):
    """load_source's arrays and a string saying where the base colours came from."""
    if name not in CATALOGUE:
        raise KeyError(f"unknown source {name!r}; known: {', '.join(CATALOGUE)}")
    package, path, up, _ = CATALOGUE[name]
    if not os.path.exists(path):
        raise SourceUnavailable(f"{path} missing: apt-get install -y {package}")
    if path.lower().endswith(".3ds"):
        path = _converted(path)
    parts, textures = _parts(path)
    verts, faces, colours, sources, offset = [], [], [], [], 0
    for geom in parts:
        v = np.asarray(geom.vertices, dtype=np.float64)
        verts.append(v)
        faces.append(np.asarray(geom.faces, dtype=np.int64) + offset)
        c, how = _base_colour(geom, textures)
        colours.append(c if c is not None else np.full((len(v), 3), np.nan))
        sources.append(how)
        offset += len(v)
    v = np.concatenate(verts)
    if up == "y":
        v = np.stack([v[:, 0], -v[:, 2], v[:, 1]], axis=1)
    elif up == "-z":  # half a turn about x
        v = np.stack([v[:, 0], -v[:, 1], -v[:, 2]], axis=1)
    lo, hi = v.min(axis=0), v.max(axis=0)
    v = (v - (lo + hi) / 2) * (0.9 / (hi - lo).max())
    pbr = procedural_pbr(v)
    given = np.concatenate(colours)
    has = np.all(np.isfinite(given), axis=1)
    pbr[has, 0:3] = given[has]
    return (v.astype(np.float32), np.concatenate(faces).astype(np.int32),
            np.clip(pbr, 0, 1).astype(np.float32), ", ".join(sorted(set(sources))))


def write_source(name, out_dir):
    """Writes out_dir/<name>.safetensors and returns its path."""
    v, f, pbr, info = load_source_with_info(name)
    package, path, _, _ = CATALOGUE[name]
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"{name}.safetensors")
    safetensors_lite.write(out, {"vertices": v, "faces": f, "pbr": pbr}, {
        "format": "sparse3d-glb-source/1", "name": name, "package": package, "file": path,
        "licence": licence_line(package), "pbr_layout": PBR_LAYOUT,
        "base_color_from": info})
    return out


def list_sources():
    rows = []
    for name, (package, path, up, note) in CATALOGUE.items():
        row = {"name": name, "package": package, "file": path, "up": up, "note": note}
        try:
            v, f, _, info = load_source_with_info(name)
            row.update(available=True, vertices=int(len(v)), faces=int(len(f)),
                       base_color_from=info)
        except SourceUnavailable as e:
            row.update(available=False, reason=str(e))
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description="Real meshes from Debian packages as judge sources")
    ap.add_argument("--list", action="store_true", help="list the sources and whether they load")
    ap.add_argument("--name", help="a source name (see --list), or 'all'")
    ap.add_argument("--out", help="output folder for NAME.safetensors")
    ap.add_argument("--json", action="store_true", help="--list as JSON")
    args = ap.parse_args()
    if args.list:
        rows = list_sources()
        if args.json:
            print(json.dumps(rows, indent=2))
        for r in rows if not args.json else []:
            what = (f"{r['faces']:>7} faces  base colour: {r['base_color_from']}"
                    if r["available"] else f"unavailable: {r['reason']}")
            print(f"{r['name']:<12} {r['package']:<18} {what}")
        return 0
    if not args.name or not args.out:
        ap.error("give --list, or --name and --out")
    names = list(CATALOGUE) if args.name == "all" else [args.name]
    status = 0
    for name in names:
        try:
            print(write_source(name, args.out))
        except SourceUnavailable as e:
            print(f"{name}: skipped: {e}", file=sys.stderr)
            status = 1 if args.name != "all" else status
    return status


if __name__ == "__main__":
    sys.exit(main())
