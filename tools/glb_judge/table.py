#!/usr/bin/env python3
"""One Markdown table from a glb_export.sh results folder: per case and setting, the time of
sparse3d's export-glb and of the original's to_glb + export (per stage in the JSON), the
speedup, and the judge's quality figures for both. Usage: table.py RESULTS_DIR [> table.md]
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compact_json  # noqa: E402  (tools/: the bench results' JSON layout)


def ours_times(log_path):
    """Stage seconds printed by `sparse3d export-glb` (lines '  NAME   X.XXX s')."""
    stages = {}
    if not os.path.exists(log_path):
        return stages
    for line in open(log_path):
        m = re.match(r"^  (\S.*?)\s+([0-9.]+) s$", line.rstrip())
        if m:
            stages[m.group(1)] = float(m.group(2))
    return stages


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def main():
    res = sys.argv[1]
    tags = sorted({re.sub(r"^(ours|orig|judge)_", "", os.path.basename(p)).split(".")[0]
                   for p in glob.glob(os.path.join(res, "*"))
                   if re.match(r"^(ours|orig|judge)_.+_[0-9]+_[0-9]+(\.|$)", os.path.basename(p))})
    rows, detail = [], {}
    for tag in tags:
        ours = ours_times(os.path.join(res, f"ours_{tag}.log"))
        orig_p = os.path.join(res, f"orig_{tag}.json")
        orig = json.load(open(orig_p)) if os.path.exists(orig_p) else {}
        judge_p = os.path.join(res, f"judge_{tag}", "judge.json")
        judge = json.load(open(judge_p))["glbs"] if os.path.exists(judge_p) else {}
        mem_p = os.path.join(res, f"ours_{tag}.mem")
        mem = [int(x) for x in open(mem_p).read().split() if x.isdigit()] if os.path.exists(mem_p) else []
        ours_peak_mib = max(mem) if mem else None
        detail[tag] = {"sparse3d_stages_s": ours, "sparse3d_device_peak_mib": ours_peak_mib,
                       "original": orig, "judge": judge}
        t_ours = ours.get("total")
        t_orig = orig.get("total_s")
        speed = t_orig / t_ours if t_ours and t_orig else None

        def q(name, key, spec):
            g = judge.get(name, {})
            v = g.get("check", {}).get("ok") if key == "structure_ok" else g.get(key)
            if isinstance(v, dict):
                v = sum(v.get(c, 0) for c in ("r", "g", "b")) / 3 if key == "texture_mae" else None
            return fmt(v, spec)
        orig_peak = orig.get("peak_device_bytes")
        rows.append(f"| {tag} | {fmt(t_orig, '.2f')} | {fmt(t_ours, '.2f')} | "
                    f"{fmt(speed, '.1f')}x | "
                    f"{fmt(orig_peak / 2**20 if orig_peak else None, '.0f')} / {fmt(ours_peak_mib, 'd')} | "
                    f"{q('original', 'faces', 'd')} / {q('sparse3d', 'faces', 'd')} | "
                    f"{q('original', 'chamfer', '.2e')} / {q('sparse3d', 'chamfer', '.2e')} | "
                    f"{q('original', 'hausdorff', '.2e')} / {q('sparse3d', 'hausdorff', '.2e')} | "
                    f"{q('original', 'texture_mae', '.4f')} / {q('sparse3d', 'texture_mae', '.4f')} | "
                    f"{q('original', 'atlas_utilisation', '.3f')} / {q('sparse3d', 'atlas_utilisation', '.3f')} | "
                    f"{q('original', 'seam_unfilled_texels', 'd')} / {q('sparse3d', 'seam_unfilled_texels', 'd')} | "
                    f"{q('original', 'structure_ok', '')} / {q('sparse3d', 'structure_ok', '')} |")
    print("| case_target_texture | original s | sparse3d s | speedup | device peak MiB (orig / ours) | "
          "faces (orig / ours) | Chamfer /D | Hausdorff /D | base colour MAE | atlas use | unfilled band texels | GLB ok |")
    print("|---|---:|---:|---:|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    # Seconds per stage, ours and the original's, one row per case (the stages' own names).
    print()
    for tag in tags:
        ours = detail[tag]["sparse3d_stages_s"]
        orig = detail[tag]["original"].get("stages_s", {})
        print(f"- {tag}: sparse3d " + ", ".join(f"{k} {v:.2f}" for k, v in ours.items()) +
              ("; original " + ", ".join(f"{k} {v:.2f}" for k, v in orig.items()) if orig else ""))
    with open(os.path.join(res, "summary.json"), "w") as fh:
        compact_json.dump(detail, fh)


if __name__ == "__main__":
    main()
