#!/usr/bin/env python3
"""Are the decoded surface's points that lie far from a GLB's mesh hidden inside the model?
(docs/EXPORT.md, "Cavities".)

The judge measures Chamfer and Hausdorff distances from points spread over the whole decoded
surface, hidden ones included. This samples that surface as the judge does (seed 0), keeps
the samples farther than --far (a fraction of the bounding-box diagonal) from the GLB's mesh,
and for up to --check of them takes the generalized winding number of the decoded surface at
two points a third of a voxel off the sample, one on each side of its face. Where both are
above 0.5, solid lies on both sides: the sample is on a surface embedded in the model (a part
pushed into another), which nobody outside can see. A sample with open space on a side may
be visible, or may face a sealed void; this does not tell those apart.

    python3 tools/glb_judge/hidden_samples.py --case CASE.safetensors --glb OURS.glb \
        [--far 5e-3] [--check 30] [--resolution 1024]

The winding numbers are summed over every face (exact, no tree): about a second per sample
for a surface of six million faces.
"""
import argparse

import numpy as np

import glbfile
import judge
import meshops


def winding(v, f, q):
    """The generalized winding number of the triangles (v, f) at the point q."""
    a, b, c = v[f[:, 0]] - q, v[f[:, 1]] - q, v[f[:, 2]] - q
    la, lb, lc = (np.sqrt((x * x).sum(1)) for x in (a, b, c))
    det = (a * np.cross(b, c)).sum(1)
    den = la * lb * lc + (a * b).sum(1) * lc + (b * c).sum(1) * la + (c * a).sum(1) * lb
    return (2 * np.arctan2(det, den)).sum() / (4 * np.pi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True)
    ap.add_argument("--glb", required=True)
    ap.add_argument("--far", type=float, default=5e-3)
    ap.add_argument("--check", type=int, default=30)
    ap.add_argument("--samples", type=int, default=300000)
    ap.add_argument("--resolution", type=int, default=1024)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    case = judge.Case(a.case)
    glb = glbfile.load_glb(a.glb)
    out_v = judge.glb_to_input(glb.positions).astype(np.float64)
    p, face, _ = meshops.sample_surface(case.vertices, case.faces, a.samples, rng)
    _, _, _, d = meshops.Projector(out_v, glb.faces, 100000, rng).query(p)
    v = case.vertices.astype(np.float64)
    d = d / np.linalg.norm(v.max(0) - v.min(0))
    far = np.flatnonzero(d > a.far)
    print(f"decoded-surface samples farther than {a.far:.1e} of the diagonal from the GLB: "
          f"{len(far)} of {len(d)} ({100 * len(far) / len(d):.3f}%)")
    if len(far) > a.check:
        far = rng.choice(far, a.check, replace=False)
    f = case.faces
    n = np.cross(v[f[face, 1]] - v[f[face, 0]], v[f[face, 2]] - v[f[face, 0]])
    n /= np.linalg.norm(n, axis=1, keepdims=True) + 1e-30
    off = (v.max(0) - v.min(0)).max() / a.resolution / 3
    lo = np.array([min(winding(v, f, p[i] + off * n[i]), winding(v, f, p[i] - off * n[i]))
                   for i in far])
    if len(lo):
        print(f"checked {len(lo)}: solid on both sides (embedded, hidden) {(lo > 0.5).sum()}, "
              f"open space on a side {(lo <= 0.5).sum()}; the smaller winding number's "
              f"quantiles 0/10/50/90/100%: {np.round(np.quantile(lo, [0, .1, .5, .9, 1]), 2)}")


if __name__ == "__main__":
    main()
