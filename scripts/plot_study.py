#!/usr/bin/env python3
"""Draws a study's figures from the files `mpsim study` writes (summary.json and seeds.csv), nothing else.

    .venv/bin/python scripts/plot_study.py --out DIR STUDY_DIR [STUDY_DIR ...]

For each STUDY_DIR (an `mpsim study loss-scaling|recipes --out STUDY_DIR`, its runs/ not needed):
  DIR/<name>-table.png   the table as a figure: per row, each seed's difference to fp32 (d_s = metric_s - fp32
                         metric_s, from seeds.csv: the configurations share fp32's seeds), their mean with the
                         plain 95 % and the Bonferroni interval (summary.json's paired_ci95 and paired_ci), and
                         the tolerance band (+-tolerance), the verdict beside it.
  DIR/<name>-seed-differences.csv   the points drawn: configuration, seed, d_s.
And over all STUDY_DIRs together (rows of different studies and models pooled):
  DIR/study-measures.png  per row, how much worse than fp32 it ended (the mean of d_s with its 95 % interval, as
                          a % of fp32's mean metric, the worse side positive whatever the metric's direction, so
                          that bits/token and mAP share an axis) against each measure of what the formats lost
                          (summary.json's means over seeds: the share of non-zero gradients flushed, the share of
                          their sum |g| and of their sum g^2 flushed, 1 - the cosine between the gradients before
                          and after rounding, the lost bias, and the share of the flushed mass pushing down),
                          with Spearman's rank correlation per measure on each panel;
  DIR/study-measures.csv  per measure: the rows it has a value for (n) and Spearman's rho;
  DIR/study-measures-rows.csv  per row: the study, the configuration, the "worse by" and every measure.
fp32 itself (the reference, d = 0 by construction) is left out of the correlations and the measure figure.

Spearman's rho is Pearson's correlation of the ranks, tied values sharing their mean rank. A malformed or
missing input gets one message naming the file and exit status 2; outputs are written to a temporary name
and renamed, so a failed run leaves no partial file.
"""
import argparse
import csv
import json
import math
import os
import sys
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (name in the CSVs, summary.json key, axis label, how the value is drawn): "1-" is 1 - the mean over seeds of
# the key's per-seed list. The keys are those study.cpp writes per row (docs/cli.md, study loss-scaling).
MEASURES = [
    ("flushed_pct", "activation_grad_lost_pct_mean", "share of non-zero gradients flushed (%)", "value"),
    ("l1_lost_pct", "activation_grad_l1_lost_pct_mean", "share of their Σ|g| flushed (%)", "value"),
    ("l2sq_lost_pct", "activation_grad_l2sq_lost_pct_mean", "share of their Σg² flushed (%)", "value"),
    ("one_minus_cosine", "activation_grad_cosine_per_seed", "1 − cosine(gradient, rounded gradient)", "1-"),
    ("lost_bias", "activation_grad_lost_bias_mean", "lost bias (flushed Σg / Σ|g|)", "value"),
    ("push_down", "activation_grad_push_down_mean", "share of the flushed mass pushing down", "value"),
]


class InputError(Exception):
    pass


def number(value, where):
    """A float from a JSON number or the strings mpsim writes for non-finite values ("nan", "inf")."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "+inf"):
        return float(value)
    raise InputError(f"{where}: expected a number, found {value!r}")


def load_study(study_dir):
    study_dir = Path(study_dir)
    summary_path, seeds_path = study_dir / "summary.json", study_dir / "seeds.csv"
    for p in (summary_path, seeds_path):
        if not p.is_file():
            raise InputError(f"{p}: missing (a study folder holds summary.json and seeds.csv from `mpsim study`)")
    try:
        summary = json.loads(summary_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{summary_path}: not valid JSON ({e})") from None
    if not isinstance(summary, dict) or not str(summary.get("schema", "")).startswith("mpsim-study-"):
        raise InputError(f"{summary_path}: not an mpsim study summary (no \"schema\": \"mpsim-study-N\")")
    for key in ("rows", "higher_is_better", "metric", "model"):
        if key not in summary:
            raise InputError(f"{summary_path}: no {key!r}")
    rows = summary["rows"]
    ref = [r for r in rows if r.get("verdict") == "reference"]
    if len(ref) != 1:
        raise InputError(f"{summary_path}: expected one reference row (fp32), found {len(ref)}")
    try:
        with open(seeds_path, newline="") as f:
            seed_rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{seeds_path}: unreadable ({e})") from None
    per_config = {}
    for i, s in enumerate(seed_rows, start=2):
        try:
            per_config.setdefault(s["configuration"], {})[int(s["seed"])] = float(s["final_metric"])
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"{seeds_path} line {i}: needs configuration, seed and final_metric ({e})") from None
    ref_seeds = per_config.get(ref[0]["configuration"])
    if not ref_seeds:
        raise InputError(f"{seeds_path}: no seeds of the reference {ref[0]['configuration']!r}")
    diffs = {}
    for r in rows:
        name = r.get("configuration")
        seeds = per_config.get(name)
        if not seeds:
            raise InputError(f"{seeds_path}: no seeds of {name!r} (listed in {summary_path})")
        if set(seeds) != set(ref_seeds):
            raise InputError(f"{seeds_path}: {name!r} has seeds {sorted(seeds)}, fp32 has {sorted(ref_seeds)}")
        diffs[name] = [(k, seeds[k] - ref_seeds[k]) for k in sorted(seeds)]
    return {"dir": study_dir, "name": study_dir.resolve().name, "summary": summary, "ref": ref[0], "diffs": diffs}


def spearman(x, y):
    """Spearman's rho: Pearson's correlation of the ranks (ties get their mean rank); nan if either is constant."""

    def ranks(v):
        v = np.asarray(v, dtype=float)
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            r[order[i : j + 1]] = (i + j) / 2 + 1
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry)))
    return float(np.dot(rx, ry)) / den if den > 0 else float("nan")


def save(fig_or_writer, path):
    """Writes to PATH.tmp then renames, so an interrupted run leaves no partial file."""
    tmp = path.with_name(path.name + ".tmp")
    if callable(fig_or_writer):
        fig_or_writer(tmp)
    else:
        # No Software / date metadata: the same inputs give the same bytes.
        fig_or_writer.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
        plt.close(fig_or_writer)
    os.replace(tmp, path)


def write_csv(path, header, rows):
    def writer(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(header)
            w.writerows(rows)

    save(writer, path)


def table_figure(study, out_dir):
    s = study["summary"]
    rows = [r for r in s["rows"] if r["verdict"] != "reference"]
    worse = "lower" if s["higher_is_better"] else "higher"
    tol = number(study["ref"]["tolerance"], "tolerance")
    level = number(rows[0]["paired_ci_level"], "paired_ci_level") if rows else 1.0
    fig, ax = plt.subplots(figsize=(9, 0.36 * len(rows) + 1.6))
    ax.axvspan(-tol, tol, color="#d9ead3", zorder=0, label=f"tolerance ±{tol:.4g}")
    ax.axvline(0, color="0.5", lw=0.8, zorder=1)
    points = []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        name = r["configuration"]
        d = [v for _, v in study["diffs"][name]]
        points += [(name, k, v) for k, v in study["diffs"][name]]
        lo, hi = (number(v, f"{name} paired_ci") for v in r["paired_ci"])
        lo95, hi95 = (number(v, f"{name} paired_ci95") for v in r["paired_ci95"])
        ax.plot([lo, hi], [y, y], color="#3c78d8", lw=1.2, zorder=2)
        ax.plot([lo, lo], [y - 0.18, y + 0.18], color="#3c78d8", lw=1.2, zorder=2)
        ax.plot([hi, hi], [y - 0.18, y + 0.18], color="#3c78d8", lw=1.2, zorder=2)
        ax.plot([lo95, hi95], [y, y], color="#1c4587", lw=4, solid_capstyle="butt", zorder=3)
        ax.plot(d, [y + 0.22] * len(d), "o", ms=3, mfc="none", mec="#cc0000", zorder=4)
        ax.plot([np.mean(d)], [y], "|", ms=10, mew=2, color="k", zorder=5)
        ax.annotate(r["verdict"], xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["configuration"] for r in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    n_seeds = len(next(iter(study["diffs"].values())))
    ax.set_xlabel(f"{s['metric']} − fp32's, seed by seed ({worse} is worse)")
    ax.set_title(
        f"{s['model']}, {s.get('steps', '?')} steps, {n_seeds} seeds: each seed's difference to fp32 (circles), "
        f"mean (bar),\n95 % interval (thick) and Bonferroni interval at {level:.4g} (thin), "
        f"{len(rows)} rows compared",
        fontsize=9,
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    save(fig, out_dir / f"{study['name']}-table.png")
    write_csv(out_dir / f"{study['name']}-seed-differences.csv", ["configuration", "seed", "difference"], points)


def measure_value(r, key, how, where):
    if how == "1-":
        per_seed = [number(v, where) for v in r.get(key, [])]
        return 1.0 - float(np.mean(per_seed)) if per_seed else float("nan")
    if key not in r:
        raise InputError(f"{where}: no {key!r}")
    return number(r[key], where)


def measures_figure(studies, out_dir):
    table = []  # (study, configuration, worse_pct, lo95, hi95, skipped steps, measures...)
    for st in studies:
        s = st["summary"]
        sign = -1.0 if s["higher_is_better"] else 1.0
        ref_mean = abs(number(st["ref"]["metric_mean"], "fp32 metric_mean"))
        if not ref_mean > 0:
            raise InputError(f"{st['dir'] / 'summary.json'}: fp32's mean metric is {ref_mean}, cannot scale by it")
        for r in s["rows"]:
            if r["verdict"] == "reference":
                continue
            where = f"{st['dir'] / 'summary.json'} row {r['configuration']!r}"
            d = [v for _, v in st["diffs"][r["configuration"]]]
            lo, hi = sorted(sign * number(v, where) * 100 / ref_mean for v in r["paired_ci95"])
            skipped = number(r.get("skipped_steps_mean", 0), where)
            vals = [measure_value(r, key, how, where) for _, key, _, how in MEASURES]
            label = r["configuration"] if len(studies) == 1 else f"{st['name']}: {r['configuration']}"
            table.append((st["name"], label, sign * float(np.mean(d)) * 100 / ref_mean, lo, hi, skipped, *vals))
    first = 6  # index of the first measure in a table row
    fig, axes = plt.subplots(2, 3, figsize=(12, 8.6))
    correlations = []
    for m, (name, key, label, _) in enumerate(MEASURES):
        ax = axes.flat[m]
        pts = [(t[first + m], t[2], t[3], t[4], t[5], i + 1) for i, t in enumerate(table) if math.isfinite(t[first + m])]
        rho = spearman([p[0] for p in pts], [p[1] for p in pts]) if len(pts) >= 3 else float("nan")
        # The same without the rows that skipped steps: their loss comes from the updates they dropped (inf/NaN
        # gradients under a loss scale too large), which no measure of what rounding lost can see.
        kept = [p for p in pts if p[4] == 0]
        rho_kept = spearman([p[0] for p in kept], [p[1] for p in kept]) if len(kept) >= 3 else float("nan")
        correlations.append((name, key, len(pts), rho, len(kept), rho_kept))
        x = np.array([p[0] for p in pts])
        positive = x[x > 0]
        if len(positive) and (x >= 0).all() and positive.max() / positive.min() > 100:
            # Log axis over many decades; zeros (nothing lost) drawn at a tenth of the smallest non-zero value.
            floor = positive.min() / 10
            ax.set_xscale("log")
            ax.axvline(floor, color="0.85", lw=0.8)
            ax.annotate("0", xy=(floor, 0.01), xycoords=("data", "axes fraction"), fontsize=7, ha="center")
            xs = np.where(x > 0, x, floor)
        else:
            xs = x
        for (_, y, lo, hi, skipped, number_), xv in zip(pts, xs):
            color = "#cc0000" if skipped > 0 else "#1c4587"
            ax.plot([xv, xv], [lo, hi], color=color, lw=0.8, alpha=0.5)
            ax.plot([xv], [y], "o", ms=4, color=color)
            ax.annotate(str(number_), xy=(xv, y), xytext=(3, 2), textcoords="offset points", fontsize=6.5, color="0.25")
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("worse than fp32 (% of fp32's metric)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_title(f"Spearman ρ = {rho:+.2f} over {len(pts)} rows,\n{rho_kept:+.2f} over the {len(kept)} "
                     "that skipped no step", fontsize=8.5)
    def short(label):  # the key under the panels: "lstm-v8192: fp8-none" for "study-recipes-lstm-v8192: fp8-none"
        return label.removeprefix("study-").removeprefix("recipes-")

    key_text = "   ".join(f"{i + 1} {short(t[1])}" for i, t in enumerate(table))
    # Room under the panels for the key, about 200 characters a line at this size.
    key_lines = math.ceil(len(key_text) / 200)
    fig.set_figheight(8.6 + 0.12 * key_lines)
    fig.text(0.5, 0.005, key_text, ha="center", va="bottom", fontsize=6.5, wrap=True)
    names = ", ".join(st["name"] for st in studies)
    fig.suptitle(
        f"Which measure of what rounding lost ranks the rows by their loss against fp32? ({names})\n"
        "each row: the mean seed-by-seed difference with its 95 % interval; red: rows that skipped steps",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, min(0.3, 0.015 + 0.016 * key_lines), 1, 1))
    save(fig, out_dir / "study-measures.png")
    write_csv(out_dir / "study-measures.csv",
              ["measure", "summary_key", "rows", "spearman_rho", "rows_without_skipped_steps",
               "spearman_rho_without_skipped_steps"],
              [(name, k, n, f"{rho:.6g}", nk, f"{rk:.6g}") for name, k, n, rho, nk, rk in correlations])
    header = ["study", "configuration", "worse_pct", "worse_pct_ci95_low", "worse_pct_ci95_high", "skipped_steps_mean"]
    write_csv(out_dir / "study-measures-rows.csv", header + [name for name, _, _, _ in MEASURES],
              [[t[0], t[1]] + [f"{v:.9g}" for v in t[2:]] for t in table])
    return correlations


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="+", metavar="STUDY_DIR")
    ap.add_argument("--out", required=True, metavar="DIR")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        studies = [load_study(d) for d in args.studies]
        if len({st["name"] for st in studies}) != len(studies):
            raise InputError("two study folders share a name: their figures would overwrite each other")
        out.mkdir(parents=True, exist_ok=True)
        for st in studies:
            table_figure(st, out)
        correlations = measures_figure(studies, out)
    except InputError as e:
        print(f"plot_study.py: {e}", file=sys.stderr)
        return 2
    for name, _, n, rho, nk, rk in correlations:
        print(f"  {name:16s} Spearman rho {rho:+.3f} over {n} rows, {rk:+.3f} over the {nk} that skipped no step")
    print(f"wrote {out}/: " + ", ".join(f"{st['name']}-table.png" for st in studies) + ", study-measures.png/.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
