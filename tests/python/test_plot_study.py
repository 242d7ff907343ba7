"""scripts/plot_study.py on the committed studies (docs/study-recipes-lstm-v8192, docs/study-recipes-ssd-300,
docs/study-recipes-lstm-v8192-400, docs/study-lstm-accumulate-1024), pooled as docs/study.md draws them, into a
temporary folder.

What it checks, each against values computed here from the study's own files, not from the script:
- every seed's difference to fp32 the table figure draws equals final_metric - fp32's final_metric of the same
  seed in seeds.csv, and their mean per row equals summary.json's delta_vs_fp32 (the C++ study's);
- every row's measures and "worse than fp32" (in % of fp32's mean, the worse side positive) equal those
  recomputed from summary.json, and each measure's Spearman rho equals one computed here (ranks by counting,
  ties sharing their mean rank, then statistics.correlation), over all rows and over the rows that skipped
  no step;
- the committed docs/study-figures/study-measures.csv is what the script gives today (so the README's numbers
  follow the committed summaries); the PNGs exist, are PNGs, are under 300 kB and are not blank;
- a study folder without summary.json, and a seeds.csv that lacks a row's seed, exit 2 with a message naming
  the file, writing nothing.
Each check prints what it compared."""
import contextlib
import csv
import importlib.util
import io
import json
import math
import os
import statistics

import pytest

ROOT = os.environ.get("MPSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "plot_study.py")
STUDY = os.path.join(ROOT, "docs", "study-recipes-lstm-v8192")
STUDIES = [STUDY] + [os.path.join(ROOT, "docs", name) for name in
                      ("study-recipes-ssd-300", "study-recipes-lstm-v8192-400", "study-lstm-accumulate-1024")]
COMMITTED = os.path.join(ROOT, "docs", "study-figures")

matplotlib = pytest.importorskip("matplotlib")


def plot(out, *studies):
    """(exit status, stdout, stderr) of the script's main(), run in this process (no second interpreter start)."""
    spec = importlib.util.spec_from_file_location("plot_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = module.main(["--out", str(out), *studies])
    return status, stdout.getvalue(), stderr.getvalue()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def spearman_by_counting(x, y):
    def ranks(v):
        return [sum(w < a for w in v) + (sum(w == a for w in v) + 1) / 2 for a in v]

    return statistics.correlation(ranks(x), ranks(y))


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot_study")
    status, stdout, stderr = plot(out, *STUDIES)
    print(stdout, stderr)
    assert status == 0, stderr
    return out


@pytest.mark.parametrize("study", STUDIES, ids=os.path.basename)
def test_seed_differences(drawn, study):
    summary = json.load(open(os.path.join(study, "summary.json")))
    seeds = read_csv(os.path.join(study, "seeds.csv"))
    metric = {(s["configuration"], int(s["seed"])): float(s["final_metric"]) for s in seeds}
    drawn_rows = read_csv(drawn / f"{os.path.basename(study)}-seed-differences.csv")
    rows = [r for r in summary["rows"] if r["verdict"] != "reference"]
    n_seeds = summary["seeds"]
    assert len(drawn_rows) == len(rows) * n_seeds, (len(drawn_rows), len(rows), n_seeds)
    mismatches, worst_mean = 0, 0.0
    for p in drawn_rows:
        want = metric[(p["configuration"], int(p["seed"]))] - metric[("fp32", int(p["seed"]))]
        mismatches += float(p["difference"]) != want
    for r in rows:
        d = [float(p["difference"]) for p in drawn_rows if p["configuration"] == r["configuration"]]
        assert len(d) == n_seeds, r["configuration"]
        worst_mean = max(worst_mean, abs(statistics.fmean(d) - r["delta_vs_fp32"]))
    print(f"{len(drawn_rows)} seed differences ({len(rows)} rows x {n_seeds} seeds) against seeds.csv: "
          f"{mismatches} differ; per-row mean against summary.json's delta_vs_fp32: worst |error| {worst_mean:.3g}")
    assert mismatches == 0
    assert worst_mean < 1e-12


def test_measures_and_rank_correlations(drawn):
    nan = float("nan")

    def num(v):
        return float(v) if not isinstance(v, str) else nan

    def want_row(r, summary, ref):
        worse = (-1 if summary["higher_is_better"] else 1) * r["delta_vs_fp32"] * 100 / abs(ref["metric_mean"])
        return {
            "worse_pct": worse,
            "skipped_steps_mean": num(r["skipped_steps_mean"]),
            "flushed_pct": num(r["activation_grad_lost_pct_mean"]),
            "l1_lost_pct": num(r["activation_grad_l1_lost_pct_mean"]),
            "l2sq_lost_pct": num(r["activation_grad_l2sq_lost_pct_mean"]),
            "one_minus_cosine": 1 - statistics.fmean(r["activation_grad_cosine_per_seed"]),
            "lost_bias": num(r["activation_grad_lost_bias_mean"]),
            "push_down": num(r["activation_grad_push_down_mean"]),
        }

    # Pooled over the studies: each row against its own study's fp32, named "<study>: <configuration>".
    want = {}
    for study in STUDIES:
        summary = json.load(open(os.path.join(study, "summary.json")))
        ref = next(r for r in summary["rows"] if r["verdict"] == "reference")
        for r in summary["rows"]:
            if r["verdict"] != "reference":
                want[f"{os.path.basename(study)}: {r['configuration']}"] = want_row(r, summary, ref)
    got = {g["configuration"]: g for g in read_csv(drawn / "study-measures-rows.csv")}
    assert set(got) == set(want), set(got) ^ set(want)
    compared, worst = 0, 0.0
    for name, w in want.items():
        for k, v in w.items():
            g = float(got[name][k])
            if math.isnan(v):
                assert math.isnan(g), (name, k, g)
            else:
                # 1 - cosine is a difference near 1: the mean's last bit is worth 1e-16 absolute.
                worst = max(worst, abs(g - v) / (abs(v) + 1e-14))
            compared += 1
    print(f"{compared} row values ({len(want)} rows) against summary.json: worst relative error {worst:.3g}")
    assert worst < 1e-8  # the CSV holds 9 significant digits

    measures = read_csv(drawn / "study-measures.csv")
    assert [m["measure"] for m in measures] == list(next(iter(want.values())))[2:]
    for m in measures:
        k = m["measure"]
        pts = [(w[k], w["worse_pct"], w["skipped_steps_mean"]) for w in want.values() if not math.isnan(w[k])]
        kept = [p for p in pts if p[2] == 0]
        rho = spearman_by_counting([p[0] for p in pts], [p[1] for p in pts])
        rho_kept = spearman_by_counting([p[0] for p in kept], [p[1] for p in kept])
        print(f"  {k:16s} rho {float(m['spearman_rho']):+.6f} (here {rho:+.6f}) over {m['rows']} rows (here "
              f"{len(pts)}); {float(m['spearman_rho_without_skipped_steps']):+.6f} (here {rho_kept:+.6f}) over "
              f"{m['rows_without_skipped_steps']} (here {len(kept)})")
        assert int(m["rows"]) == len(pts) and int(m["rows_without_skipped_steps"]) == len(kept)
        assert abs(float(m["spearman_rho"]) - rho) < 1e-5
        assert abs(float(m["spearman_rho_without_skipped_steps"]) - rho_kept) < 1e-5


def test_committed_figures_follow_the_summaries(drawn):
    import matplotlib.image

    committed = open(os.path.join(COMMITTED, "study-measures.csv")).read()
    fresh = (drawn / "study-measures.csv").read_text()
    print(f"docs/study-figures/study-measures.csv against a fresh run: {'equal' if committed == fresh else 'DIFFERENT'}")
    assert committed == fresh, "docs/study-figures is stale: rerun scripts/plot_study.py (docs/study.md)"
    for name in [f"{os.path.basename(s)}-table.png" for s in STUDIES] + ["study-measures.png"]:
        for folder in (drawn, COMMITTED):
            path = os.path.join(folder, name)
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
            pixels = matplotlib.image.imread(path)
            spread = float(pixels[..., :3].std())
            print(f"  {path}: {size} bytes, {pixels.shape[1]}x{pixels.shape[0]}, pixel sd {spread:.3f}")
            assert size < 300_000 and spread > 0.05  # the pooled measures figure of two studies is ~230 kB


def test_bad_input(tmp_path):
    empty = tmp_path / "no-study"
    empty.mkdir()
    out = tmp_path / "out"
    status, _, stderr = plot(out, str(empty))
    print(f"no summary.json: exit {status}, {stderr.strip()}")
    assert status == 2 and "summary.json" in stderr and str(empty) in stderr
    assert not out.exists() or not any(out.iterdir())

    broken = tmp_path / "study-missing-seed"
    broken.mkdir()
    (broken / "summary.json").write_text(open(os.path.join(STUDY, "summary.json")).read())
    seeds = open(os.path.join(STUDY, "seeds.csv")).read().splitlines(keepends=True)
    victim = next(i for i, line in enumerate(seeds) if line.startswith("fp8-none,"))
    (broken / "seeds.csv").write_text("".join(seeds[:victim] + seeds[victim + 1 :]))
    status, _, stderr = plot(out, str(broken))
    print(f"seeds.csv without one fp8-none seed: exit {status}, {stderr.strip()}")
    assert status == 2 and "seeds.csv" in stderr and "fp8-none" in stderr
    assert not out.exists() or not any(out.iterdir())
