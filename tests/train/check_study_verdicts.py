"""Recomputes a loss-scaling study's paired intervals and verdicts from its raw CSVs, independently of
lib/mpsim/train/study.cpp.

  check_study_verdicts.py STUDY_DIR [STUDY_DIR ...]

For every configuration in STUDY_DIR/summary.csv it reads each seed's final metric from seeds.csv and checks
it against the run's own runs/<runs>/seed<k>/steps.csv (the metric at the last step; a seed diverged if it
stopped before the last step or its last loss or metric is not finite). From those alone it recomputes, for
every row against fp32 seed by seed (d_s = metric_s - fp32 metric_s):
  the mean and sample sd of d, its 95 % interval and its Bonferroni interval at level 1 - 0.05 / m
  (m = rows compared with fp32), mean(d) +- t sd(d) / sqrt(n), the Student t quantile computed here by
  integrating the density (not Boost, not a table), and the verdict under the rule stated in summary.md:
  diverged if a seed diverged; else, with the Bonferroni interval of "worse by" (worse follows the metric's
  direction) and tol = tolerance_pct % of |mean(fp32)|: "matches fp32" if inside [-tol, tol], "degraded" if
  above tol, "better than fp32" if below -tol, "inconclusive" otherwise; fp32 itself is "reference".
Then compares with summary.csv. Prints every configuration checked; exit status 1 on any difference.
Standard library only.
"""
import csv
import functools
import json
import math
import sys
from pathlib import Path


@functools.lru_cache(maxsize=None)
def t_quantile(p, dof):
    """The t with P(T <= t) = p (p > 0.5) for Student's t with `dof` degrees of freedom.

    With t = sqrt(dof) tan(theta) the density becomes c cos(theta)^(dof - 1) on [0, pi/2), c =
    Gamma((dof + 1) / 2) / (sqrt(pi) Gamma(dof / 2)): a smooth bounded integrand (Simpson's rule), whatever
    the tail, then bisection on theta."""
    c = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(math.pi)

    def mass_from_zero(theta, n=2000):
        h = theta / n
        f = lambda u: c * math.cos(u) ** (dof - 1)
        s = f(0) + f(theta) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n))
        return s * h / 3

    lo, hi = 0.0, math.pi / 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if mass_from_zero(mid) < p - 0.5:
            lo = mid
        else:
            hi = mid
    return math.sqrt(dof) * math.tan((lo + hi) / 2)


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


def interval(d, p):
    """mean(d) -+ t(p, n - 1) sd(d) / sqrt(n), NaN when n < 2."""
    n = len(d)
    mean = sum(d) / n
    if n < 2:
        return mean, float("nan"), float("nan"), float("nan")
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(p, n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def same(want, value, tol):
    if math.isnan(want) or math.isnan(value):
        return math.isnan(want) and math.isnan(value)
    return math.isclose(want, value, rel_tol=1e-12, abs_tol=tol + 1e-12 * abs(value))


def check(folder):
    folder = Path(folder)
    summary = json.load(open(folder / "summary.json"))
    steps, higher = summary["steps"], summary["higher_is_better"]
    with open(folder / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    with open(folder / "seeds.csv") as f:
        seeds = list(csv.DictReader(f))
    failures = 0
    per_row = []
    for row in rows:
        mine = sorted((s for s in seeds if s["runs"] == row["runs"]), key=lambda s: int(s["seed"]))
        metrics = [number(s["final_metric"]) for s in mine]
        diverged = 0
        for s, m in zip(mine, metrics):  # seeds.csv against the run's own steps.csv
            m_steps, div = seed_result(folder / "runs" / row["runs"] / f"seed{s['seed']}" / "steps.csv", steps)
            diverged += div
            if not same(m, m_steps, 0) or int(s["diverged"]) != div:
                print(f"MISMATCH: {row['runs']} seed {s['seed']}: seeds.csv {m} / diverged {s['diverged']}, "
                      f"steps.csv {m_steps} / diverged {int(div)}")
                failures += 1
        per_row.append((row, metrics, diverged))
    fp32_row, fp32, _ = per_row[0]
    assert fp32_row["configuration"] == "fp32", "the first row must be fp32"
    m = max(1, len(rows) - 1)
    level = 1 - 0.05 / m
    tol = summary["tolerance_pct"] / 100 * abs(sum(fp32) / len(fp32))
    for row, metrics, diverged in per_row:
        d = [a - b for a, b in zip(metrics, fp32)]
        mean, sd, lo95, hi95 = interval(d, 0.975)
        _, _, lo, hi = interval(d, 1 - (1 - level) / 2)
        worse_lo, worse_hi = (-hi, -lo) if higher else (lo, hi)
        if row is fp32_row:
            verdict = "reference"
        elif diverged:
            verdict = "diverged"
        elif not (math.isfinite(worse_lo) and math.isfinite(worse_hi)):
            verdict = "inconclusive"
        elif worse_lo >= -tol and worse_hi <= tol:
            verdict = "matches fp32"
        elif worse_lo > tol:
            verdict = "degraded"
        elif worse_hi < -tol:
            verdict = "better than fp32"
        else:
            verdict = "inconclusive"
        problems = []
        if verdict != row["verdict"]:
            problems.append(f"verdict {row['verdict']!r}, recomputed {verdict!r}")
        if len(metrics) != int(row["seeds"]):
            problems.append(f"{row['seeds']} seeds in summary.csv, {len(metrics)} in seeds.csv")
        # means and sd to rounding; the intervals to 1e-6 of their half-width (this t is integrated numerically)
        half95, half = (hi95 - lo95) / 2, (hi - lo) / 2
        for key, value, abs_tol in (("delta_vs_fp32", mean, 1e-12), ("paired_delta_sd", sd, 1e-9),
                                    ("paired_ci95_low", lo95, 1e-6 * half95), ("paired_ci95_high", hi95, 1e-6 * half95),
                                    ("paired_ci_low", lo, 1e-6 * half), ("paired_ci_high", hi, 1e-6 * half),
                                    ("paired_ci_level", level, 1e-15), ("tolerance", tol, 1e-15)):
            if not same(number(row[key]), value, abs_tol if math.isfinite(abs_tol) else 0):
                problems.append(f"{key} {row[key]} in summary.csv, recomputed {value}")
        if int(row["diverged_seeds"]) != diverged:
            problems.append(f"diverged_seeds {row['diverged_seeds']}, recomputed {diverged}")
        status = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        print(f"{folder.name}: {row['configuration']:<44} {len(metrics)} seeds, vs fp32 {mean:+.6g} "
              f"[{lo:+.6g}, {hi:+.6g}] at {level:.4g}, tolerance {tol:.4g} -> {verdict}: {status}")
        failures += bool(problems)
    return len(rows), failures


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
