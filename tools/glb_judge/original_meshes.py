#!/usr/bin/env python3
"""What TRELLIS.2's remesh branch leaves at each step, on a GLB input file: the original's own
calls (CuMesh's fill_holes, cuBVH, remesh_narrow_band_dc, simplify), in to_glb's order and with
its arguments, and per step the mesh's faces, vertices, surface area, connected components,
boundary and non-manifold edges (docs/EXPORT.md, "Cavities").

    python3 tools/glb_judge/original_meshes.py --case CASE.safetensors \
        --decimation-target 500000 --json OUT.json [--npz SIMPLIFIED.npz]

--npz keeps the simplified mesh (vertices, faces; the original's axes, before to_glb's swap).
Needs the original's packages (cumesh) and scipy; builds nothing.
"""
import argparse
import json

import numpy as np

from meshops import face_areas  # the judge's own (this script's folder is on sys.path)


def mesh_stats(v, f):
    """faces, vertices, area, components (by shared vertices), boundary and non-manifold edges."""
    import scipy.sparse as sp
    import scipy.sparse.csgraph as cg
    v = v.astype(np.float64)
    f = f.astype(np.int64)
    area = face_areas(v, f)
    e = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
    _, count = np.unique(e[:, 0] * len(v) + e[:, 1], return_counts=True)
    adj = sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(len(v), len(v)))
    n, label = cg.connected_components(adj, directed=False)
    comp_area = np.bincount(label[f[:, 0]], weights=area, minlength=n)
    comp_faces = np.bincount(label[f[:, 0]], minlength=n)
    comp_area = comp_area[comp_faces > 0]
    order = np.argsort(-comp_area)
    return {
        "faces": int(len(f)), "vertices": int(len(v)), "area": float(area.sum()),
        "components": int(len(comp_area)),
        "largest_component_areas": [float(a) for a in comp_area[order[:4]]],
        "boundary_edges": int((count == 1).sum()), "non_manifold_edges": int((count > 2).sum()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", required=True)
    ap.add_argument("--decimation-target", type=int, default=500000)
    ap.add_argument("--remesh-band", type=float, default=1.0)
    ap.add_argument("--json", required=True)
    ap.add_argument("--npz", help="where the simplified mesh goes")
    args = ap.parse_args()

    import torch
    from safetensors import safe_open
    import cumesh
    import cumesh.remeshing

    with safe_open(args.case, "pt") as fh:
        meta = fh.metadata()
        vertices = fh.get_tensor("vertices").cuda()
        faces = fh.get_tensor("faces").cuda()
    grid = torch.tensor(json.loads(meta["grid_size"]))
    aabb = torch.tensor(json.loads(meta["aabb"]), dtype=torch.float32).cuda()
    out = {"case": args.case, "decimation_target": args.decimation_target}
    out["input"] = mesh_stats(vertices.cpu().numpy(), faces.cpu().numpy())

    mesh = cumesh.CuMesh()
    mesh.init(vertices, faces)
    mesh.fill_holes(max_hole_perimeter=3e-2)  # to_glb's first step
    vertices, faces = mesh.read()
    bvh = cumesh.cuBVH(vertices, faces)
    resolution = int(grid.max().item())
    scale = (aabb[1] - aabb[0]).max().item()
    rv, rf = cumesh.remeshing.remesh_narrow_band_dc(
        vertices, faces, center=aabb.mean(dim=0),
        scale=(resolution + 3 * args.remesh_band) / resolution * scale, resolution=resolution,
        band=args.remesh_band, project_back=0, bvh=bvh)
    out["remesh"] = mesh_stats(rv.cpu().numpy(), rf.cpu().numpy())
    mesh.init(rv, rf)
    mesh.simplify(args.decimation_target)
    sv, sf = mesh.read()
    sv, sf = sv.cpu().numpy(), sf.cpu().numpy()
    out["simplify"] = mesh_stats(sv, sf)
    if args.npz:
        np.savez_compressed(args.npz, vertices=sv, faces=sf)
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=1)
    for step in ("input", "remesh", "simplify"):
        print(step, json.dumps(out[step]))


if __name__ == "__main__":
    main()
