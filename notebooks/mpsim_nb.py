"""Shared helpers for the notebooks: find and run mpsim, the figure conventions, saving figures.

Notebooks read mpsim's JSON/CSV outputs only; they never re-implement an analysis (docs/design.md).
Environment:
  MPSIM_BIN       the mpsim executable (default: build/tools/mpsim beside this folder)
  MPSIM_NB_SIZE   "small" (what ./run test uses) or "full" (./run demo); default "full"
  MPSIM_NB_DATA   folder of mpsim outputs to read (the study); default: made by the notebook itself
  MPSIM_FIGURES   where figures go (default notebooks/figures)
"""
import json
import math
import os
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = Path(os.environ.get("MPSIM_BIN", ROOT / "build" / "tools" / "mpsim"))
SIZE = os.environ.get("MPSIM_NB_SIZE", "full")
FIGURES = Path(os.environ.get("MPSIM_FIGURES", HERE / "figures"))
WORK = Path(os.environ.get("MPSIM_NB_WORK", ROOT / "out" / "notebooks" / SIZE))

# Okabe & Ito (2008) colour-blind-safe palette.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
plt.rcParams.update({
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.grid": True,
    "grid.alpha": 0.3,
})


def run(*args, check=True):
    """Runs mpsim with the given arguments; returns its stdout."""
    cmd = [str(BIN), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def load_json(path):
    with open(path) as f:
        return json.load(f)


def formats():
    """The format table from `mpsim formats --json`, by name."""
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / "formats.json"
    run("formats", "--json", out)
    return {f["name"]: f for f in load_json(out)["formats"]}


def pow2_label(k):
    """'2^k (decimal)' as the field labels format lines."""
    return f"$2^{{{k:g}}}$ ({2.0 ** k:.3g})"


def log2_ticks(ax, lo, hi, step=None, axis="x"):
    """Ticks at powers of two on a log2 axis (data already in log2 units)."""
    span = hi - lo
    step = step or max(1, int(2 ** math.floor(math.log2(max(span / 12, 1)))))
    ticks = list(range(int(math.ceil(lo / step) * step), int(hi) + 1, step))
    labels = [f"$2^{{{t}}}$" for t in ticks]
    if axis == "x":
        ax.set_xticks(ticks, labels)
    else:
        ax.set_yticks(ticks, labels)


def format_lines(ax, fmt, axis="x", label=True, color="0.25", heights=(0.97, 0.80, 0.63)):
    """A format's max finite and min normal as dashed lines and its min subnormal as a dotted line, each
    labelled with 2^k and its decimal value (log2 units on `axis`). Labels are staggered so they never
    overlap: min subnormal and max finite on the left of their lines (max finite is usually at the right
    edge of the plot), min normal on the right."""
    marks = [
        (fmt["log2_min_subnormal"], ":", f"{fmt['name']} min subnormal", "right", heights[2]),
        (fmt["log2_min_normal"], "--", f"{fmt['name']} min normal", "left", heights[1]),
        (fmt["log2_max_finite"], "--", f"{fmt['name']} max finite", "right", heights[0]),
    ]
    box = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8)
    for k, style, name, side, h in marks:
        line = ax.axvline if axis == "x" else ax.axhline
        line(k, ls=style, color=color, lw=1)
        if not label:
            continue
        text = f"{name} {pow2_label(round(k, 3))}"
        if axis == "x":
            ax.annotate(text, (k, h), xycoords=("data", "axes fraction"), xytext=(-3 if side == "right" else 3, 0),
                        textcoords="offset points", ha=side, va="top", fontsize=7, color=color, bbox=box)
        else:
            ax.annotate(text, (h, k), xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=7,
                        color=color, bbox=box)


def save(fig, name, data=None):
    """Saves the figure as PNG and SVG under FIGURES, and the data behind it as JSON (what the tests
    compare; pixels are not compared)."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / f"{name}.png", bbox_inches="tight")
    fig.savefig(FIGURES / f"{name}.svg", bbox_inches="tight")
    if data is not None:
        with open(FIGURES / f"{name}.data.json", "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
    plt.close(fig)
    return FIGURES / f"{name}.png"


# ---- the loss-scaling study ------------------------------------------------------------------------
# Small settings (./run test): a short study with 2 seeds; full settings (./run demo): what
# scripts/demo.sh ran, passed in MPSIM_NB_DATA.
SMALL_STUDY = {"steps": 40, "seeds": 2}


def study(model):
    """The folder of `mpsim study loss-scaling --model MODEL`: MPSIM_NB_DATA/MODEL when given, else a
    study run here once (small settings in tests) and reused by every notebook."""
    data = os.environ.get("MPSIM_NB_DATA")
    if data:
        folder = Path(data) / f"study-{model}"
        if not folder.exists():
            folder = Path(data) / model
        if not (folder / "summary.json").exists():
            raise FileNotFoundError(f"{folder}/summary.json: run the study first (./run demo)")
        return folder
    folder = WORK / "study" / model
    if not (folder / "summary.json").exists():
        args = ["study", "loss-scaling", "--model", model, "--out", folder]
        if SIZE == "small":
            args += ["--steps", SMALL_STUDY["steps"], "--seeds", SMALL_STUDY["seeds"]]
        run(*args)
    return folder


def read_csv(path):
    """steps.csv as a dict of numpy columns (empty cells -> NaN)."""
    import csv

    import numpy as np

    with open(path) as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    cols = {}
    for i, name in enumerate(head):
        cols[name] = np.array([float(r[i]) if r[i] not in ("", "nan") else float("nan") for r in body])
    return cols


def study_runs(folder, row):
    """The per-seed steps.csv columns of one summary row."""
    base = Path(folder) / "runs" / row["runs"]
    return [read_csv(p / "steps.csv") for p in sorted(base.glob("seed*")) if (p / "steps.csv").exists()]


def merged_histogram(hists):
    """Sums analysis::Log2Histogram JSONs (bins as [n, count] pairs) into (exponents, counts, zero)."""
    import numpy as np

    lo = min(h["min_exp"] for h in hists)
    hi = max(h["max_exp"] for h in hists)
    counts = np.zeros(hi - lo + 1)
    zero = 0
    for h in hists:
        zero += h["zero"]
        for n, c in h["bins"]:
            counts[n - lo] += c
    return np.arange(lo, hi + 1), counts, zero
