"""A glTF 2.0 structure check of a .glb that trusts no single library.

  python3 tools/glb_judge/check_glb.py FILE.glb      (prints the result as JSON; exit 1 if not ok)

The container is parsed here byte by byte (glbfile.parse_container: magic, version 2, total
length, 4-byte aligned chunks, JSON first then at most one BIN). Then the document:
  - buffers: buffer 0 without a uri is the BIN chunk and fits in it (padding of at most 3
    bytes); bufferViews lie inside their buffer; byteStride is 4..252 and a multiple of 4;
  - accessors: known componentType and type, count >= 1, the last element inside its
    bufferView, component alignment, min/max lengths match the type;
  - mesh primitives: POSITION is a float VEC3 with min and max present and equal to the data
    (relative tolerance 1e-6 of the largest coordinate magnitude), NORMAL a float VEC3,
    TEXCOORD_n a float or normalised unsigned VEC2, all attributes the same count, indices an
    unsigned SCALAR without byteStride, all indices below the vertex count, a triangle list's
    index count a multiple of 3; materials, textures, samplers, images and nodes referenced
    exist;
  - images: a bufferView or uri, and the mimeType matches the bytes' magic (PNG, JPEG or WebP);
    a WebP image is used only through EXT_texture_webp, which is then in extensionsUsed, and in
    extensionsRequired when that texture has no fallback core source; extensionsRequired is a
    subset of extensionsUsed;
  - loaders: trimesh.load(path, force='mesh') and pygltflib's GLTF2().load_binary must both
    succeed (each reports its own error otherwise; a loader that is not installed is reported
    as skipped in `loaders`, not as a problem).
Returns {ok, problems, vertices, faces, images, file_size, extensions_used,
extensions_required, loaders}; ok is True only when problems is empty."""
import io
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glbfile  # noqa: E402

TYPES = glbfile.WIDTH
COMPONENT_SIZE = {5120: 1, 5121: 1, 5122: 2, 5123: 2, 5125: 4, 5126: 4}
INDEX_TYPES = {5121, 5123, 5125}


def image_kind(data):
    """The format the bytes are, by their magic number."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class Checker:
    def __init__(self, doc, binary, path):
        self.doc, self.binary, self.path = doc, binary, path
        self.problems = []
        self.buffers = []

    def bad(self, msg):
        self.problems.append(msg)

    def items(self, key):
        value = self.doc.get(key, [])
        if not isinstance(value, list):
            self.bad(f"'{key}' is not an array")
            return []
        return value

    def ref(self, key, index, where):
        """True when `index` names an element of the top-level array `key`."""
        if not isinstance(index, int) or not 0 <= index < len(self.items(key)):
            self.bad(f"{where}: {key} index {index!r} does not exist")
            return False
        return True

    def check_asset(self):
        version = self.doc.get("asset", {}).get("version")
        if version != "2.0":
            self.bad(f"asset.version is {version!r}, not '2.0'")

    def check_buffers(self):
        base_dir = os.path.dirname(os.path.abspath(self.path))
        for i, buf in enumerate(self.items("buffers")):
            length = buf.get("byteLength")
            if not isinstance(length, int) or length < 1:
                self.bad(f"buffer {i}: byteLength {length!r} is not a positive integer")
                length = 0
            if "uri" not in buf:
                if i != 0 or self.binary is None:
                    self.bad(f"buffer {i} has no uri and no BIN chunk backs it")
                    self.buffers.append(b"")
                    continue
                if length > len(self.binary):
                    self.bad(f"buffer 0: byteLength {length} > BIN chunk {len(self.binary)}")
                elif len(self.binary) - length > 3:
                    self.bad(f"BIN chunk ({len(self.binary)} bytes) exceeds buffer 0's "
                             f"byteLength {length} by more than the 3 bytes of padding")
                self.buffers.append(self.binary)
            else:
                try:
                    self.buffers.append(glbfile.load_buffers({"buffers": [buf]}, None,
                                                             base_dir)[0])
                except (OSError, ValueError) as e:
                    self.bad(f"buffer {i}: uri cannot be read ({e})")
                    self.buffers.append(b"")
        for i, view in enumerate(self.items("bufferViews")):
            if not self.ref("buffers", view.get("buffer"), f"bufferView {i}"):
                continue
            start, length = view.get("byteOffset", 0), view.get("byteLength", 0)
            size = self.items("buffers")[view["buffer"]].get("byteLength", 0)
            if not isinstance(length, int) or length < 1:
                self.bad(f"bufferView {i}: byteLength {length!r} is not a positive integer")
            elif start < 0 or start + length > size:
                self.bad(f"bufferView {i}: bytes [{start}, {start + length}) lie outside "
                         f"buffer {view['buffer']} of {size} bytes")
            stride = view.get("byteStride")
            if stride is not None and not (4 <= stride <= 252 and stride % 4 == 0):
                self.bad(f"bufferView {i}: byteStride {stride} is not a multiple of 4 in "
                         "4..252")

    def check_accessor(self, i, acc):
        ctype, kind, count = acc.get("componentType"), acc.get("type"), acc.get("count")
        if ctype not in COMPONENT_SIZE:
            self.bad(f"accessor {i}: componentType {ctype!r} is not a glTF component type")
            return
        if kind not in TYPES:
            self.bad(f"accessor {i}: type {kind!r} is not a glTF accessor type")
            return
        if not isinstance(count, int) or count < 1:
            self.bad(f"accessor {i}: count {count!r} is not a positive integer")
            return
        for key in ("min", "max"):
            if key in acc and len(acc[key]) != TYPES[kind]:
                self.bad(f"accessor {i}: {key} has {len(acc[key])} values for type {kind}")
        if "bufferView" not in acc:
            return
        if not self.ref("bufferViews", acc["bufferView"], f"accessor {i}"):
            return
        view = self.items("bufferViews")[acc["bufferView"]]
        elem = COMPONENT_SIZE[ctype] * TYPES[kind]
        stride = view.get("byteStride") or elem
        offset = acc.get("byteOffset", 0)
        need = offset + stride * (count - 1) + elem
        if need > view.get("byteLength", 0):
            self.bad(f"accessor {i}: {count} x {kind} of componentType {ctype} needs {need} "
                     f"bytes, bufferView {acc['bufferView']} has {view.get('byteLength', 0)}")
        if (offset + view.get("byteOffset", 0)) % COMPONENT_SIZE[ctype]:
            self.bad(f"accessor {i}: data not aligned to its {COMPONENT_SIZE[ctype]}-byte "
                     "components")
        if stride % COMPONENT_SIZE[ctype]:
            self.bad(f"accessor {i}: stride {stride} not a multiple of the component size")

    def read(self, index):
        """The accessor's data, or None (with a problem) when it cannot be read."""
        try:
            return glbfile.read_accessor(self.doc, self.buffers, index)
        except (glbfile.GlbError, KeyError, TypeError, ValueError, IndexError) as e:
            self.bad(f"accessor {index}: cannot be read ({e})")
            return None

    def check_position(self, index, where):
        acc = self.doc["accessors"][index]
        if acc.get("componentType") != 5126 or acc.get("type") != "VEC3":
            self.bad(f"{where}: POSITION accessor {index} is not a float VEC3")
            return None
        data = self.read(index)
        if data is None:
            return None
        if not np.all(np.isfinite(data)):
            self.bad(f"{where}: POSITION has non-finite values")
            return data
        if "min" not in acc or "max" not in acc:
            self.bad(f"{where}: POSITION accessor {index} lacks min/max (required)")
            return data
        tol = 1e-6 * max(1.0, float(np.abs(data).max()))
        for key, actual in (("min", data.min(axis=0)), ("max", data.max(axis=0))):
            declared = np.asarray(acc[key], dtype=np.float64)
            if declared.shape == actual.shape and np.any(np.abs(declared - actual) > tol):
                self.bad(f"{where}: POSITION {key} {declared.tolist()} != data {key} "
                         f"{actual.tolist()}")
        return data

    def check_primitive(self, where, prim):
        attrs = prim.get("attributes", {})
        counts = {}
        for name, index in attrs.items():
            if self.ref("accessors", index, f"{where} attribute {name}"):
                counts[name] = self.doc["accessors"][index].get("count")
        if len(set(counts.values())) > 1:
            self.bad(f"{where}: attributes have different counts {counts}")
        if "POSITION" not in counts:
            self.bad(f"{where}: no POSITION attribute")
            return 0, 0
        self.check_position(attrs["POSITION"], where)
        nverts = counts["POSITION"]
        if "NORMAL" in counts:
            acc = self.doc["accessors"][attrs["NORMAL"]]
            if acc.get("componentType") != 5126 or acc.get("type") != "VEC3":
                self.bad(f"{where}: NORMAL accessor is not a float VEC3")
        for name in counts:
            if name.startswith("TEXCOORD_"):
                acc = self.doc["accessors"][attrs[name]]
                normalised_uint = acc.get("componentType") in (5121, 5123) and acc.get(
                    "normalized", False)
                if acc.get("type") != "VEC2" or not (acc.get("componentType") == 5126
                                                     or normalised_uint):
                    self.bad(f"{where}: {name} is not a float or normalised unsigned VEC2")
        mode = prim.get("mode", 4)
        nfaces = 0
        if "indices" in prim and self.ref("accessors", prim["indices"], f"{where} indices"):
            acc = self.doc["accessors"][prim["indices"]]
            if acc.get("type") != "SCALAR" or acc.get("componentType") not in INDEX_TYPES:
                self.bad(f"{where}: indices accessor is not an unsigned SCALAR")
            views = self.items("bufferViews")
            view_index = acc.get("bufferView")
            view = views[view_index] if isinstance(view_index, int) and 0 <= view_index < len(
                views) else {}
            if "byteStride" in view:
                self.bad(f"{where}: the indices' bufferView has a byteStride")
            idx = self.read(prim["indices"])
            if idx is not None:
                idx = idx.reshape(-1)
                if idx.size and int(idx.max()) >= nverts:
                    self.bad(f"{where}: index {int(idx.max())} is not below the vertex count "
                             f"{nverts} ({int((idx >= nverts).sum())} indices out of range)")
                if mode == 4 and idx.size % 3:
                    self.bad(f"{where}: {idx.size} indices is not a multiple of 3")
                nfaces = idx.size // 3 if mode == 4 else max(idx.size - 2, 0)
        elif "indices" not in prim:
            nfaces = nverts // 3 if mode == 4 else max(nverts - 2, 0)
        if mode not in (4, 5, 6):
            nfaces = 0
        if "material" in prim:
            self.ref("materials", prim["material"], f"{where} material")
        return nverts, nfaces

    def check_images(self):
        images = []
        webp_images = set()
        for i, img in enumerate(self.items("images")):
            data = None
            if "bufferView" in img:
                if not self.ref("bufferViews", img["bufferView"], f"image {i}"):
                    continue
                if "mimeType" not in img:
                    self.bad(f"image {i}: mimeType is required with a bufferView")
                try:
                    data = bytes(glbfile.view_bytes(self.doc, self.buffers, img["bufferView"])[0])
                except (glbfile.GlbError, IndexError) as e:
                    self.bad(f"image {i}: {e}")
            elif "uri" in img:
                try:
                    data, _ = glbfile.decode_image(self.doc, self.buffers, i,
                                                   os.path.dirname(os.path.abspath(self.path)))
                except Exception as e:  # noqa: BLE001 (any decoder failure is the finding)
                    self.bad(f"image {i}: cannot be read ({e})")
            else:
                self.bad(f"image {i}: neither bufferView nor uri")
            if data is None:
                continue
            kind = image_kind(data)
            declared = img.get("mimeType")
            entry = {"index": i, "mimeType": declared, "bytes_are": kind, "size": len(data)}
            if kind is None:
                self.bad(f"image {i}: bytes are not PNG, JPEG or WebP (start {data[:12]!r})")
            elif declared is not None and declared != kind:
                self.bad(f"image {i}: mimeType {declared} but the bytes are {kind}")
            if kind == "image/webp":
                webp_images.add(i)
            try:
                from PIL import Image
                with Image.open(io.BytesIO(data)) as pil:
                    pil.load()
                    entry.update(width=pil.width, height=pil.height, mode=pil.mode)
            except Exception as e:  # noqa: BLE001
                self.bad(f"image {i}: does not decode ({e})")
            images.append(entry)
        return images, webp_images

    def check_textures(self, webp_images):
        used = self.doc.get("extensionsUsed", [])
        required = self.doc.get("extensionsRequired", [])
        for ext in required:
            if ext not in used:
                self.bad(f"extension {ext} is required but not in extensionsUsed")
        for i, tex in enumerate(self.items("textures")):
            ext = tex.get("extensions", {}).get("EXT_texture_webp")
            if "sampler" in tex:
                self.ref("samplers", tex["sampler"], f"texture {i}")
            if "source" in tex and self.ref("images", tex["source"], f"texture {i} source"):
                if tex["source"] in webp_images:
                    self.bad(f"texture {i}: core 'source' is a WebP image (only PNG/JPEG are "
                             "core; WebP goes through EXT_texture_webp)")
            if ext is not None:
                if not self.ref("images", ext.get("source"), f"texture {i} EXT_texture_webp"):
                    continue
                if ext["source"] not in webp_images:
                    self.bad(f"texture {i}: EXT_texture_webp source {ext['source']} is not WebP")
                if "EXT_texture_webp" not in used:
                    self.bad(f"texture {i} uses EXT_texture_webp but extensionsUsed lacks it")
                if "source" not in tex and "EXT_texture_webp" not in required:
                    self.bad(f"texture {i} has no fallback source but extensionsRequired lacks "
                             "EXT_texture_webp")
        for i, mat in enumerate(self.items("materials")):
            pbr = mat.get("pbrMetallicRoughness", {})
            infos = [("baseColorTexture", pbr.get("baseColorTexture")),
                     ("metallicRoughnessTexture", pbr.get("metallicRoughnessTexture")),
                     ("normalTexture", mat.get("normalTexture")),
                     ("occlusionTexture", mat.get("occlusionTexture")),
                     ("emissiveTexture", mat.get("emissiveTexture"))]
            for name, info in infos:
                if info is not None:
                    self.ref("textures", info.get("index"), f"material {i} {name}")

    def check_meshes(self):
        nverts = nfaces = 0
        for m, mesh in enumerate(self.items("meshes")):
            for p, prim in enumerate(mesh.get("primitives", [])):
                v, f = self.check_primitive(f"mesh {m} primitive {p}", prim)
                nverts += v
                nfaces += f
        for i, node in enumerate(self.items("nodes")):
            if "mesh" in node:
                self.ref("meshes", node["mesh"], f"node {i}")
            for c in node.get("children", []):
                self.ref("nodes", c, f"node {i} child")
        for s, scene in enumerate(self.items("scenes")):
            for n in scene.get("nodes", []):
                self.ref("nodes", n, f"scene {s}")
        if "scene" in self.doc:
            self.ref("scenes", self.doc["scene"], "default scene")
        return nverts, nfaces


def _load_trimesh(path):
    import trimesh
    mesh = trimesh.load(path, force="mesh")
    return f"ok ({len(mesh.vertices)} vertices, {len(mesh.faces)} faces)"


def _load_pygltflib(path):
    from pygltflib import GLTF2
    gltf = GLTF2().load_binary(path)
    if gltf is None:
        raise ValueError("load_binary returned None")
    return f"ok ({len(gltf.meshes)} meshes)"


def try_loaders(path):
    """Each loader's verdict: 'ok ...', 'error: ...' or 'skipped: ... not installed'."""
    import importlib.util
    out = {}
    for name, load in (("trimesh", _load_trimesh), ("pygltflib", _load_pygltflib)):
        if importlib.util.find_spec(name) is None:
            out[name] = f"skipped: {name} is not installed"
            continue
        try:
            out[name] = load(path)
        except Exception as e:  # noqa: BLE001 (the loader's failure is the finding)
            out[name] = f"error: {type(e).__name__}: {e}"
    return out


def check_glb(path, loaders=True):
    result = {"path": path, "ok": False, "problems": [], "vertices": 0, "faces": 0,
              "images": [], "file_size": 0, "extensions_used": [], "extensions_required": []}
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        result["problems"].append(f"cannot read: {e}")
        return result
    result["file_size"] = len(blob)
    doc, binary, problems = glbfile.parse_container(blob)
    result["problems"].extend(problems)
    if doc is not None:
        c = Checker(doc, binary, path)
        c.check_asset()
        c.check_buffers()
        for i, acc in enumerate(c.items("accessors")):
            c.check_accessor(i, acc)
        result["images"], webp = c.check_images()
        c.check_textures(webp)
        result["vertices"], result["faces"] = c.check_meshes()
        result["problems"].extend(c.problems)
        result["extensions_used"] = doc.get("extensionsUsed", [])
        result["extensions_required"] = doc.get("extensionsRequired", [])
    if loaders:
        result["loaders"] = try_loaders(path)
        for name, verdict in result["loaders"].items():
            if verdict.startswith("error"):
                result["problems"].append(f"{name} cannot load the file: {verdict}")
    result["ok"] = not result["problems"]
    return result


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("glb")
    ap.add_argument("--no-loaders", action="store_true", help="skip trimesh and pygltflib")
    args = ap.parse_args()
    result = check_glb(args.glb, loaders=not args.no_loaders)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
