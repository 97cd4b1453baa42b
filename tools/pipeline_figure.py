"""The headline of README.md, from what tools/torch_ref/pipeline_memory.py wrote: TRELLIS.2's
denoise stages through its own `pipeline.run` order, PyTorch against the sparse3d drop-in,
per asset (service order: each asset once), with low_vram off and on. Prints the markdown
table README.md carries and, where matplotlib is installed, draws the figure beside it.

  python3 tools/pipeline_figure.py \
      --off bench/results/2026-12-02-h200-pipeline-memory-per-process/off_1024.json \
      --on bench/results/2026-12-02-h200-pipeline-memory-per-process/on_1024.json \
      --date 2026-12-02 --figure bench/results/2026-12-02-h200-pipeline-memory-per-process/pipeline_1024.png

The table: per asset, the seconds of each stage (structure, shape, texture) and their sum for
both sides, the speedup of the sum, and the device-wide peak (cudaMemGetInfo, polled) for
both. Nothing here measures: every number is read from the JSON files, so the README's table
can be regenerated and checked (tests/python/test_pipeline_figure.py)."""
import argparse
import json
import math
import sys

GIB = float(1 << 30)
STAGES = ("structure", "shape", "texture")
SIDES = ("pytorch", "sparse3d")


def rows(result, pipeline_type):
    """One dict per asset, in the run's (service) order: tokens, per side the stage seconds,
    the total and the device peak in GiB."""
    runs = {side: result["sides"][side]["runs"] for side in SIDES}
    out = []
    for asset, info in result["assets"].items():
        key = f"{pipeline_type}/{asset}"
        if not all(key in runs[side] for side in SIDES):
            continue
        row = {"asset": asset, "tokens": info["tokens64"], "warm_up": asset == "warm-up"}
        for side in SIDES:
            run = runs[side][key]
            row[side] = {"stages": [run[s]["seconds"] for s in STAGES],
                         "total": run["total"]["seconds"],
                         "peak_gib": run["total"]["device_peak"] / GIB}
        row["speedup"] = row["pytorch"]["total"] / row["sparse3d"]["total"]
        out.append(row)
    return out


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(tables):
    """tables: [(low_vram, rows)]. The README's table: one line per asset."""
    lines = ["| low_vram | asset (tokens) | PyTorch s: structure + shape + texture = total | "
             "sparse3d s | speedup | device peak GiB, PyTorch / sparse3d |",
             "|---|---|---|---|---:|---|"]
    for low_vram, rs in tables:
        for r in rs:
            name = "first request (%s)" % f"{r['tokens']:,}" if r["warm_up"] else f"{r['tokens']:,}"
            cells = ["%.2f + %.2f + %.2f = **%.2f**" % (*r[side]["stages"], r[side]["total"])
                     for side in SIDES]
            lines.append("| %s | %s | %s | %s | %.2fx | %.2f / %.2f |" % (
                "on" if low_vram else "off", name, cells[0], cells[1], r["speedup"],
                r["pytorch"]["peak_gib"], r["sparse3d"]["peak_gib"]))
        served = [r["speedup"] for r in rs if not r["warm_up"]]
        lines.append("| %s | geomean after the first | | | **%.2fx** | |" % (
            "on" if low_vram else "off", geomean(served)))
    return "\n".join(lines)


def figure(tables, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(tables), figsize=(6.2 * len(tables), 7.4),
                             gridspec_kw={"height_ratios": [3, 2]}, squeeze=False)
    colours = {"pytorch": "#8c8c8c", "sparse3d": "#1f6fb4"}
    for col, (low_vram, rs) in enumerate(tables):
        labels = [("first\n" if r["warm_up"] else "") + f"{r['tokens']:,}" for r in rs]
        xs = range(len(rs))
        top, bottom = axes[0][col], axes[1][col]
        width = 0.38
        for k, side in enumerate(SIDES):
            offset = (k - 0.5) * width
            top.bar([x + offset for x in xs], [r[side]["total"] for r in rs], width,
                    color=colours[side], label="PyTorch" if side == "pytorch" else "sparse3d")
            bottom.plot(list(xs), [r[side]["peak_gib"] for r in rs], marker="o",
                        color=colours[side], label="PyTorch" if side == "pytorch" else "sparse3d")
        for x, r in zip(xs, rs):
            top.annotate("%.2fx" % r["speedup"], (x, max(r[s]["total"] for s in SIDES)),
                         textcoords="offset points", xytext=(0, 4), ha="center", fontsize=9,
                         fontweight="bold")
        top.set_title("low_vram=%s" % low_vram, fontsize=11)
        top.set_ylabel("seconds, three denoise stages")
        top.set_xticks(list(xs), labels, fontsize=8)
        top.margins(y=0.15)
        top.legend(loc="upper left", fontsize=9, frameon=False)
        bottom.set_ylabel("device-wide peak, GiB")
        bottom.set_xlabel("asset: tokens at the 1024 stages (service order)")
        bottom.set_xticks(list(xs), labels, fontsize=8)
        bottom.set_ylim(bottom=0)
        bottom.legend(loc="lower right", fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--off", required=True, help="pipeline_memory.py JSON with low_vram off")
    p.add_argument("--on", required=True, help="the same with low_vram on")
    p.add_argument("--type", default="1024", help="pipeline type (default 1024)")
    p.add_argument("--date", required=True, help="the measurement's date, for the title")
    p.add_argument("--figure", help="write the figure here (.svg or .png; needs matplotlib)")
    a = p.parse_args(argv)
    tables = []
    for low_vram, path in ((False, a.off), (True, a.on)):
        with open(path) as f:
            result = json.load(f)
        if bool(result["options"]["low_vram"]) != low_vram:
            sys.exit(f"{path}: low_vram is {result['options']['low_vram']}, expected {low_vram}")
        tables.append((low_vram, rows(result, a.type)))
        gpu = result["environment"]["device"]
        torch_version = result["environment"]["torch"]
    print(markdown(tables))
    if a.figure:
        title = ("TRELLIS.2 pipeline.run, type %s: its three denoise stages (structure, shape, "
                 "texture; released sampler settings, 12 steps each), PyTorch vs the sparse3d "
                 "drop-in\nflow models of the released shapes with random (synthetic) weights; "
                 "service order, each asset once; %s, PyTorch %s, %s"
                 % (a.type, gpu, torch_version, a.date))
        figure(tables, a.figure, title)
        print(f"figure: {a.figure}", file=sys.stderr)


if __name__ == "__main__":
    main()
