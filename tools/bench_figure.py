"""The figure of a `sparse3d bench` result (schema "sparse3d-bench/1"), drawn with matplotlib
from the JSON alone: one bar per path, its mean request latency over an asset set, with its
speedup against the reference path (and against each PyTorch baseline that ran) written on it.
The title says what was measured: the model, its weights, the protocol and sampler settings
as the result records them, the GPU and the date.

  python3 tools/bench_figure.py bench/results/STEM.json            # writes STEM.png beside it
  python3 tools/bench_figure.py X.json --out fig.png --svg         # elsewhere, and fig.svg

Results written before the bench recorded the weights' origin (settings "weights", from the
checkpoint's safetensors metadata) say "weights not recorded" unless --weights states it.
Nothing here measures; every number is read from the JSON (derived.paths: the same figures
as the markdown report). docs/BENCHMARK.md, "The figure"."""
import argparse
import json
import os
import sys

SCHEMA = "sparse3d-bench/1"
NOT_RECORDED = "not recorded"


def load(path):
    with open(path) as f:
        result = json.load(f)
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        raise ValueError(f"not a sparse3d bench result (schema {SCHEMA})")
    return result


def short(v):
    """7.5 -> "7.5", 1.0 -> "1", 0.6 -> "0.6"."""
    return "%g" % v


def model_text(s):
    """ "SLatFlowModel (30 blocks, C 1536, 12 heads), 1.29B parameters"; an older result without
    settings "model": "a 2.62B-parameter model (family not recorded)"."""
    m = s.get("model") or {}
    params = s.get("model_parameters")
    size = ("%.2fB" % (params / 1e9) if params >= 1e9 else "%.1fM" % (params / 1e6)) \
        if isinstance(params, (int, float)) and params > 0 else None
    if not m.get("family"):
        return "a %s-parameter model (family %s)" % (size, NOT_RECORDED) if size else \
            "model " + NOT_RECORDED
    out = m["family"]
    if all(isinstance(m.get(k), int) and m[k] > 0
           for k in ("num_blocks", "model_channels", "num_heads")):
        out += " (%d blocks, C %d, %d heads)" % (m["num_blocks"], m["model_channels"],
                                                 m["num_heads"])
    return out + (", %s parameters" % size if size else "")


def weights_text(s, stated=None):
    """From settings "weights" (runner.cpp: the checkpoint's safetensors metadata); an older
    result lacks it: `stated` (--weights) then, else "weights not recorded"."""
    w = s.get("weights")
    if isinstance(w, dict) and w.get("generator") == "sparse3d make-checkpoint":
        return "synthetic weights" + (" (seed %s)" % w["seed"] if "seed" in w else "")
    if isinstance(w, dict) and w.get("generator"):
        return "weights by " + w["generator"]
    if isinstance(w, dict):
        return "weights from the checkpoint (no generator in its metadata)"
    return stated or "weights " + NOT_RECORDED


def sampler_text(s):
    """ "service + repeated protocols, 15 steps, CFG 7.5 on t in [0, 1]"."""
    protocol = s.get("protocol")
    parts = ["service + repeated protocols" if protocol == "both" else
             "%s protocol" % protocol if protocol else "protocol " + NOT_RECORDED]
    steps = s.get("steps")
    parts.append("%d steps" % steps if isinstance(steps, int) else "steps " + NOT_RECORDED)
    g = s.get("guidance")
    if not isinstance(g, (int, float)):
        parts.append("CFG " + NOT_RECORDED)
    elif g == 1:
        parts.append("no CFG")
    else:
        iv = s.get("guidance_interval")
        cfg = "CFG %s" % short(g)
        cfg += " on t in [%s, %s]" % (short(iv[0]), short(iv[1])) if iv else " (interval %s)" \
            % NOT_RECORDED
        if s.get("guidance_rescale"):
            cfg += ", rescale %s" % short(s["guidance_rescale"])
        parts.append(cfg)
    return ", ".join(parts)


def title(result, stated_weights=None):
    """Two lines: what ran (model, weights), and how (protocol, sampler, assets, GPU, date)."""
    s = result.get("settings") or {}
    fp = result.get("fingerprint") or {}
    tokens = [a["tokens"] for a in result.get("assets", [])]
    assets = "%d asset%s (%s tokens)" % (
        len(tokens), "" if len(tokens) == 1 else "s",
        "{:,}".format(tokens[0]) if len(set(tokens)) == 1 else
        "{:,}-{:,}".format(min(tokens), max(tokens))) if tokens else "no assets"
    device = "CPU backend" if s.get("device") == "cpu" else fp.get("gpu_name") or \
        "GPU " + NOT_RECORDED
    date = (result.get("date") or "")[:10] or "date " + NOT_RECORDED
    return ["sparse3d bench, denoise latency per request: %s, %s"
            % (model_text(s), weights_text(s, stated_weights)),
            "%s; %s; %s, %s" % (sampler_text(s), assets, device, date)]


def comparators(result):
    """The reference path, then each baseline that ran: the speedups written on the bars."""
    ref = result["derived"]["reference_path"]
    return [ref] + [b["name"] for b in result.get("baselines", [])
                    if b.get("ran") and b["name"] != ref]


def bars(result, set_name):
    """Per path (leave-one-out variants left out), in report order: (path, mean latency s,
    assets timed, assets in the set, {comparator: geomean speedup})."""
    out = []
    for path, p in result["derived"]["paths"].items():
        if p.get("ablation_variant") or set_name not in p["sets"]:
            continue
        summary = p["sets"][set_name]
        latency = summary["latency_s"]
        if latency.get("mean") is None:
            continue
        vs = {c: summary["vs"][c]["geomean_speedup"] for c in comparators(result)
              if c != path and (summary["vs"].get(c) or {}).get("geomean_speedup")}
        of = sum(1 for a in result["assets"] if a["set"] == set_name)
        out.append((path, latency["mean"], latency["n_assets"], of, vs))
    return out


def label(path, ref, n, of, vs):
    """The text on a bar: its speedups, "reference" on the reference itself."""
    parts = ["reference" if path == ref else None]
    parts += ["%.2fx vs %s" % (v, c) for c, v in vs.items()]
    text = ", ".join(p for p in parts if p)
    return text + (" (%d of %d assets)" % (n, of) if n < of else "")


def fit(fig, ax, texts):
    """Widens the value axis until every bar's text ends inside it (so inside the frame)."""
    for _ in range(4):  # the layout moves as the ticks change; a few rounds settle it
        fig.canvas.draw()
        right = max(t.get_window_extent().x1 for t in texts)
        if right <= ax.get_window_extent().x1 - 4:
            return
        data_right = ax.transData.inverted().transform((right, 0))[0]
        ax.set_xlim(0, data_right * 1.08)


def outside(fig):
    """The texts that do not end inside the figure's frame (none, or the figure is wrong)."""
    fig.canvas.draw()
    frame = fig.bbox
    texts = [fig._suptitle] + [t for ax in fig.axes for t in
                               ax.texts + ax.get_yticklabels() + [ax.xaxis.label]]
    return [t.get_text() for t in texts
            if t is not None and t.get_visible() and t.get_text() and not (
                frame.x0 <= t.get_window_extent().x0 and t.get_window_extent().x1 <= frame.x1
                and frame.y0 <= t.get_window_extent().y0 and t.get_window_extent().y1 <= frame.y1)]


def draw(result, out_paths, stated_weights=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(result["derived"]["sets"])
    panels = [(s, bars(result, s)) for s in sets]
    panels = [(s, b) for s, b in panels if b]
    if not panels:
        raise ValueError("no path has a latency to plot")
    rows = sum(len(b) for _, b in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.6 + 0.42 * rows + 0.9 * len(panels)),
                             squeeze=False, layout="constrained", dpi=110)
    ref = result["derived"]["reference_path"]
    fig.suptitle("\n".join(title(result, stated_weights)), fontsize=10)
    fitted = []
    for ax, (set_name, bs) in zip(axes[:, 0], panels):
        ys = list(range(len(bs)))[::-1]  # report order, top to bottom
        colours = ["#8c8c8c" if b[0].startswith("torch") else
                   "#1f6fb4" if b[0] != ref else "#6a9fcf" for b in bs]
        rects = ax.barh(ys, [b[1] for b in bs], color=colours, height=0.7)
        texts = ax.bar_label(rects, ["%.2f s   %s" % (b[1], label(b[0], ref, *b[2:]))
                                     for b in bs], padding=4, fontsize=9)
        fitted.append((ax, texts))
        ax.set_yticks(ys, [b[0] for b in bs], fontsize=9)
        ax.set_xlabel("seconds per request: mean over the %d assets of set '%s' "
                      "(median of each asset's repeats); speedup: geometric mean"
                      % (bs[0][3], set_name), fontsize=9)
    for ax, texts in fitted:
        fit(fig, ax, texts)
    clipped = outside(fig)
    for path in out_paths:
        fig.savefig(path)
    plt.close(fig)
    return clipped


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("result", help="a sparse3d bench result JSON")
    p.add_argument("--out", help="the PNG to write (default: RESULT.png beside it)")
    p.add_argument("--svg", action="store_true", help="also write the same figure as .svg")
    p.add_argument("--weights", help="what the weights were, for a result that does not record "
                   "it (e.g. 'synthetic weights'); a recorded value wins")
    a = p.parse_args(argv)
    try:
        result = load(a.result)
        png = a.out or os.path.splitext(a.result)[0] + ".png"
        outs = [png] + ([os.path.splitext(png)[0] + ".svg"] if a.svg else [])
        clipped = draw(result, outs, a.weights)
    except (OSError, ValueError) as e:
        sys.exit(f"bench_figure: {a.result}: {e}")
    for path in outs:
        print(f"wrote {path}")
    if clipped:
        sys.exit("bench_figure: text outside the figure's frame: " + "; ".join(clipped))


if __name__ == "__main__":
    main()
