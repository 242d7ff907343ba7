"""Recomputes a loss-scaling study's verdicts from its raw CSVs, independently of lib/mpsim/train/study.cpp.

  check_study_verdicts.py STUDY_DIR [STUDY_DIR ...]

For every configuration in STUDY_DIR/summary.csv it reads each seed's runs/<runs>/seed<k>/steps.csv,
takes the final metric (the metric at the last step) and decides whether the seed diverged (it stopped
before the last step, or its last loss or metric is not finite). From those alone it recomputes the mean,
the sample standard deviation, the 95 % interval (Student's t quantile computed here by integrating the
density, not from a table) and the verdict under the rule stated in summary.md:
  diverged if any seed diverged; else "matches fp32" if the mean is worse than fp32's by at most
  2 x sd(fp32) + 0.01 x |mean(fp32)|, else "degraded" (worse follows the metric's direction).
Then compares with summary.csv. Prints every configuration checked; exit status 1 on any difference.
Standard library only.
"""
import csv
import json
import math
import sys
from pathlib import Path


def t_quantile_975(dof):
    """The t such that P(|T| <= t) = 0.95 for Student's t with `dof` degrees of freedom."""
    c = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))

    def cdf_from_zero(x, n=4000):  # Simpson's rule on the density over [0, x]
        h = x / n
        f = lambda t: c * (1 + t * t / dof) ** (-(dof + 1) / 2)
        s = f(0) + f(x) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n))
        return s * h / 3

    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf_from_zero(mid) < 0.475:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def number(text):
    return float(text) if text not in ("", None) else float("nan")


def seed_result(steps_csv, steps):
    """(final metric, diverged) of one run from its steps.csv."""
    with open(steps_csv) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    metric = number(last["metric"])
    loss = number(last["loss"])
    diverged = int(last["step"]) < steps or not math.isfinite(loss) or not math.isfinite(metric)
    return metric, diverged


def check(folder):
    folder = Path(folder)
    summary = json.load(open(folder / "summary.json"))
    steps, higher = summary["steps"], summary["higher_is_better"]
    with open(folder / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    computed = []
    for row in rows:
        seeds = sorted((folder / "runs" / row["runs"]).glob("seed*"), key=lambda p: int(p.name[4:]))
        results = [seed_result(p / "steps.csv", steps) for p in seeds]
        metrics = [m for m, _ in results]
        n = len(metrics)
        mean = sum(metrics) / n
        sd = math.sqrt(sum((m - mean) ** 2 for m in metrics) / (n - 1)) if n > 1 else 0.0
        half = t_quantile_975(n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
        computed.append({"row": row, "n": n, "mean": mean, "sd": sd, "half": half,
                         "diverged": sum(d for _, d in results)})
    fp32 = computed[0]
    assert fp32["row"]["configuration"] == "fp32", "the first row must be fp32"
    band = 2 * fp32["sd"] + 0.01 * abs(fp32["mean"])
    failures = 0
    for c in computed:
        row = c["row"]
        worse_by = (fp32["mean"] - c["mean"]) if higher else (c["mean"] - fp32["mean"])
        if c["diverged"] > 0:
            verdict = "diverged"
        elif math.isfinite(worse_by) and worse_by <= band:
            verdict = "matches fp32"
        else:
            verdict = "degraded"
        problems = []
        if verdict != row["verdict"]:
            problems.append(f"verdict {row['verdict']!r}, recomputed {verdict!r}")
        if c["n"] != int(row["seeds"]):
            problems.append(f"{row['seeds']} seeds in summary.csv, {c['n']} run folders")
        # mean and sd to rounding; the interval to 1e-3 of its half-width (summary.csv's t comes from a
        # three-decimal table)
        for key, value, tol in (("metric_mean", c["mean"], 1e-12), ("metric_sd", c["sd"], 1e-9),
                                ("ci95_low", c["mean"] - c["half"], 1e-3 * c["half"]),
                                ("ci95_high", c["mean"] + c["half"], 1e-3 * c["half"])):
            want = number(row[key])
            same = math.isclose(want, value, rel_tol=1e-12, abs_tol=tol + 1e-12 * abs(value))
            if not (same or (math.isnan(want) and math.isnan(value))):
                problems.append(f"{key} {want} in summary.csv, recomputed {value}")
        if int(row["diverged_seeds"]) != c["diverged"]:
            problems.append(f"diverged_seeds {row['diverged_seeds']}, recomputed {c['diverged']}")
        status = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        print(f"{folder.name}: {row['configuration']:<44} {c['n']} seeds, mean {c['mean']:.6g} "
              f"[{c['mean'] - c['half']:.6g}, {c['mean'] + c['half']:.6g}] -> {verdict}: {status}")
        failures += bool(problems)
    return len(computed), failures


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    total = failures = 0
    for folder in argv[1:]:
        n, f = check(folder)
        total += n
        failures += f
    print(f"{total} configurations recomputed, {failures} differ")
    return 1 if failures or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
