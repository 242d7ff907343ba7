"""mpsim.torch.GradientMonitor checked against PyTorch: its underflow / subnormal / overflow shares equal
those of torch's own casts (Tensor.to(float16 / bfloat16 / float8_*)) of the same values, its histograms
equal numpy's binning of the gradients captured with plain hooks, the scale is read from the real
GradScaler, and it writes the files `mpsim train` writes (steps.csv, hist/, run.json) that the notebooks read."""
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mpsim.torch as mt
from captured import capture_outputs, numpy_bins

ROOT = Path(__file__).resolve().parents[2]
TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn,
               "fp8_e5m2": torch.float8_e5m2}
# Smallest normal magnitudes: IEEE 754 binary16 2^-14, bfloat16 2^-126, OCP FP8 (v1.0) E4M3 2^-6, E5M2 2^-14.
MIN_NORMAL = {"fp16": 2.0**-14, "bf16": 2.0**-126, "fp8_e4m3": 2.0**-6, "fp8_e5m2": 2.0**-14}


def log_uniform(n, lo, hi, seed):
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.empty(n).uniform_(lo, hi, generator=g))
    return torch.where(torch.rand(n, generator=g) < 0.5, -mag, mag)


def torch_shares(values, fmt):
    """(underflow, subnormal, overflow) fractions of the non-zero finite values, from torch's cast."""
    v = values.double().flatten()
    v = v[torch.isfinite(v) & (v != 0)]
    r = v.float().to(TORCH_DTYPE[fmt]).double()
    n = v.numel()
    under = int((r == 0).sum())
    sub = int(((r != 0) & (r.abs() < MIN_NORMAL[fmt])).sum())
    over = int((~torch.isfinite(r)).sum())
    return under / n, sub / n, over / n


def test_shares_equal_torch_casts_for_every_format():
    # Magnitudes 2^-40 .. 2^20: underflow, subnormal and normal results in every format, overflow in the
    # narrow ones.
    values = log_uniform(200000, -40, 20, seed=1)
    model = nn.Linear(1, 1)
    monitor = mt.GradientMonitor(model, formats=list(TORCH_DTYPE))
    monitor.observe("probe", values)
    report = monitor.step()
    for fmt in TORCH_DTYPE:
        st = report["formats"][fmt]["activation_grad"]["sites"]["probe"]
        under, sub, over = torch_shares(values, fmt)
        print(f"{fmt}: {values.numel()} values; underflow {100 * st['zero']:.4f}% (torch {100 * under:.4f}%), "
              f"subnormal {100 * st['subnormal']:.4f}% (torch {100 * sub:.4f}%), "
              f"overflow {100 * st['overflow']:.4f}% (torch {100 * over:.4f}%)")
        assert st["zero"] == pytest.approx(under, abs=1e-15)
        assert st["subnormal"] == pytest.approx(sub, abs=1e-15)
        if fmt != "fp8_e4m3":  # torch's e4m3fn cast saturates at 448; mpsim's overflow="inf" gives NaN
            assert st["overflow"] == pytest.approx(over, abs=1e-15)
    e4m3 = report["formats"]["fp8_e4m3"]["activation_grad"]["sites"]["probe"]
    # OCP FP8 E4M3: max 448 = 1.75 * 2^8; the next step would be 480, so |x| > 464 (their midpoint; 464
    # itself ties to the even 448) overflows under round-to-nearest-even.
    want = float((values.abs() > 464).sum()) / values.numel()
    print(f"fp8_e4m3 overflow {100 * e4m3['overflow']:.4f}% (|x| > 464: {100 * want:.4f}%)")
    assert e4m3["overflow"] == pytest.approx(want, abs=1e-15)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 3))


def test_hooks_see_what_autograd_computes(tmp_path):
    model = mlp()
    monitor = mt.GradientMonitor(model, formats=["fp16"], every=1, activations=True, out=tmp_path)
    captured = capture_outputs(model, (0, 2, 4))
    x, y = torch.randn(16, 12), torch.randn(16, 3)
    F.mse_loss(model(x), y).backward()
    monitor.step()
    snap = json.loads((tmp_path / "hist" / "step_000001.json").read_text())
    assert snap["schema"] == "mpsim-train-hist-1"
    checked = 0
    for kind, key, tensors in (("activation_grad", "out_grad", captured), ("activation", "out", captured)):
        for i in (0, 2, 4):
            got = {n: c for n, c in snap[kind][f"{i}/{key}"]["bins"]}
            want = numpy_bins(tensors[f"{i}/{key}"])
            assert got == want, f"{kind} {i}/{key}"
            checked += sum(want.values())
    for name, p in model.named_parameters():
        mod, _, leaf = name.rpartition(".")
        got = {n: c for n, c in snap["weight_grad"][f"{mod}/{leaf}_grad"]["bins"]}
        assert got == numpy_bins(p.grad), name
        checked += p.grad.numel()
    print(f"hist/step_000001.json: {checked} values in {len(snap['activation_grad'])} activation-gradient, "
          f"{len(snap['activation'])} activation and {len(snap['weight_grad'])} weight-gradient sites, "
          f"bin for bin equal to numpy's binning of the tensors captured with plain hooks")


def test_modules_with_several_outputs():
    """An LSTM returns (output, (h, c)); a module may return a dict: each tensor is a site of its own."""

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return {"a": y, "b": 2 * y}

    torch.manual_seed(1)
    lstm, two = nn.LSTM(4, 3, batch_first=True), Two()
    monitor = mt.GradientMonitor(nn.ModuleList([lstm, two]), formats=["fp16"], every=1, modules=[lstm, two])
    out, (h, c) = lstm(torch.randn(2, 5, 4))
    d = two(torch.randn(2, 4))
    (out.sum() + h.sum() + c.sum() + d["a"].sum() + d["b"].sum()).backward()
    sites = monitor.step()["formats"]["fp16"]["activation_grad"]["sites"]
    print(f"sites of several-output modules: {sorted(sites)}")
    assert sorted(sites) == ["0/out.0_grad", "0/out.1.0_grad", "0/out.1.1_grad", "1/out.a_grad", "1/out.b_grad"]
    assert sites["0/out.0_grad"]["numel"] == out.numel() and sites["1/out.b_grad"]["numel"] == 8


def test_files_every_n_steps_in_the_simulators_schema(tmp_path):
    model = mlp()
    monitor = mt.GradientMonitor(model, every=3, out=tmp_path, hist_every=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sampled = []
    for step in range(1, 8):
        x, y = torch.randn(8, 12), torch.randn(8, 3)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if monitor.step(loss) is not None:
            sampled.append(step)
        opt.step()
        opt.zero_grad()
    monitor.close()
    assert sampled == [1, 4, 7]
    sys.path.insert(0, str(ROOT / "notebooks"))
    import mpsim_nb  # the notebooks' reader and histogram merge

    cols = mpsim_nb.read_csv(tmp_path / "steps.csv")
    with open(tmp_path / "steps.csv") as f:
        header = next(csv.reader(f))
    assert header[:7] == ["step", "loss", "metric", "scale", "skipped", "grad_norm", "swallowed"]
    assert list(cols["step"]) == [1, 4, 7]
    sites = [c[: -len(":zero")] for c in header if c.endswith(":zero")]
    assert sites == ["0/out_grad", "2/out_grad", "4/out_grad"]
    for fmt in mt.DEFAULT_FORMATS[1:]:
        assert f"0/out_grad:zero@{fmt}" in header and f"{fmt}:window_lo" in header
    hists = sorted(p.name for p in (tmp_path / "hist").iterdir())
    assert hists == ["step_000001.json", "step_000007.json"]  # every 2nd sampled step
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["schema"] == "mpsim-train-run-1" and run["histogram_steps"] == [1, 7]
    snap = json.loads((tmp_path / "hist" / "step_000007.json").read_text())
    exps, counts, zero = mpsim_nb.merged_histogram(list(snap["activation_grad"].values()))
    assert counts.sum() + zero == sum(h["total"] for h in snap["activation_grad"].values())
    report = json.loads((tmp_path / "underflow.json").read_text())
    assert set(report["formats"]) == set(mt.DEFAULT_FORMATS)
    print(f"steps.csv: {len(header)} columns, steps {sampled}; hist/: {hists}; underflow.json for "
          f"{sorted(report['formats'])}")


def test_steps_csv_appends_rows_and_grows_columns(tmp_path):
    monitor = mt.GradientMonitor(nn.Linear(1, 1), formats=["fp16"], every=1, hist_every=1, out=tmp_path)
    for step, sites in enumerate([["a"], ["a", "late"], ["a"], ["a"]], start=1):
        for site in sites:
            monitor.observe(site, torch.full((4,), 2.0**-20 * step))
        monitor.step()
    monitor.close()
    rows = list(csv.DictReader(open(tmp_path / "steps.csv")))
    assert [r["step"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["late:subnormal"] for r in rows] == ["", "1.0", "", ""]  # 2^-19 is an fp16 subnormal
    assert all(r["a:subnormal"] == "1.0" for r in rows)
    print(f"steps.csv: {len(rows)} rows; the site first seen at step 2 has its columns in the header")


def run_with_scale(scaler, inject_nan_at=None):
    """Three sampled steps of the MLP on fixed data (no optimiser step: the weights stay as they are),
    under `scaler` (None: no scaling). Returns the reports and the grad norms torch computes."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    monitor = mt.GradientMonitor(model, formats=["fp16", "fp8_e5m2"], every=1, scaler=scaler)
    g = torch.Generator().manual_seed(5)
    reports, norms, scales_after = [], [], []
    for step in range(3):
        x, y = torch.randn(32, 12, generator=g), torch.randn(32, 3, generator=g)
        if step == inject_nan_at:
            x[0, 0] = float("nan")
        loss = F.mse_loss(model(x), y) * 2.0**-14
        (scaler.scale(loss) if scaler else loss).backward()
        reports.append(monitor.step(loss))
        if scaler:
            scaler.unscale_(opt)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))))
        if scaler:
            scaler.step(opt)
            scaler.update()
            scales_after.append(scaler.get_scale())
        opt.zero_grad()
    return monitor, reports, norms, scales_after


def test_scale_read_from_gradscaler_and_windows_in_absolute_scales():
    plain, plain_reports, plain_norms, _ = run_with_scale(None)
    scaled, scaled_reports, scaled_norms, _ = run_with_scale(torch.amp.GradScaler("cpu", init_scale=2.0**10))
    for p, s, pn, sn in zip(plain_reports, scaled_reports, plain_norms, scaled_norms):
        assert p["loss_scale"] == 1 and s["loss_scale"] == 2.0**10
        assert p["grad_norm"] == pytest.approx(pn, rel=1e-6) and s["grad_norm"] == pytest.approx(sn, rel=1e-6)
        for fmt in ("fp16", "fp8_e5m2"):
            a, b = p["formats"][fmt]["activation_grad"], s["formats"][fmt]["activation_grad"]
            # The gradients under 2^10 are those without, times 2^10 exactly: the absolute scales agree.
            assert a["recommended_log2_scale"] == b["recommended_log2_scale"]
            assert a["window"] == b["window"]
            print(f"{fmt}: underflow at scale 1 {100 * a['total']['zero']:.3f}%, at 2^10 {100 * b['total']['zero']:.3f}%; "
                  f"window 2^{a['window'][0]:g}..2^{a['window'][1]:g} and recommended 2^{a['recommended_log2_scale']:g} "
                  f"from both runs; grad_norm {p['grad_norm']:.6g} (torch {pn:.6g})")
    # The counts of the unscaled run at 2^10 are those of the scaled run at 2^0.
    for site, counts in plain.totals["activation_grad"].items():
        want = scaled.totals["activation_grad"][site].counters["fp16"].underflow(0)
        got = counts.counters["fp16"].underflow(10)
        assert got["underflows_num"] == want["underflows_num"] and got["subnormals_num"] == want["subnormals_num"]


def test_skipped_step_is_the_one_gradscaler_skips():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    _, reports, _, scales_after = run_with_scale(scaler, inject_nan_at=1)
    skipped = [r["skipped"] for r in reports]
    print(f"skipped per step {skipped}; scale after each step {scales_after} (GradScaler backs off on a skip)")
    assert skipped == [False, True, False]
    assert scales_after == [2.0**8, 2.0**7, 2.0**7]


def test_best_window_equals_the_sweeps():
    """The monitor's window search against UnderflowCounter.sweep()'s best window (the C++ sweep over every
    scale): log-uniform data of random spans, some with zeros and infinities, every format, four ranges."""
    import random

    import mpsim
    from mpsim.torch.monitor import best_window

    rng = random.Random(7)
    compared = 0
    for seed in range(12):
        lo_exp = rng.uniform(-60, 10)
        x = log_uniform(3000, lo_exp, lo_exp + rng.uniform(0, 70), seed=100 + seed)
        if seed % 3 == 0:
            x[:5] = 0.0
            x[5] = float("inf")
        for fmt in TORCH_DTYPE:
            c = mpsim.UnderflowCounter(fmt)
            c.add(x)
            for lo, hi in [(-128, 128), (-8, 32), (-20, -10), (30, 60)]:
                w = c.sweep(lo, hi)["best_window"]
                want = None if w is None else (w["lo_log2_scale"], w["hi_log2_scale"])
                assert best_window(c, lo, hi) == want, (seed, fmt, lo, hi)
                compared += 1
    print(f"best_window: {compared} (data, format, range) cases, every one equal to the sweep's best window")


def test_bad_input_names_the_tensor():
    model = mlp()
    monitor = mt.GradientMonitor(model, formats=["fp16"])
    with pytest.raises(TypeError, match=r"activation_grad mine: dtype torch.int32"):
        monitor.observe("mine", torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"activation_grad mine: a tensor on meta"):
        monitor.observe("mine", torch.ones(3, device="meta"))
    with pytest.raises(ValueError, match=r"activation_grad mine: a torch.sparse_coo tensor"):
        monitor.observe("mine", torch.ones(3).to_sparse())
    with pytest.raises(TypeError, match=r"expected a torch.Tensor, got list"):
        monitor.observe("mine", [1.0])
    with pytest.raises(ValueError, match="every=0"):
        mt.GradientMonitor(model, every=0)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mt.GradientMonitor("model")
    with pytest.raises(Exception, match="fp99"):
        mt.GradientMonitor(model, formats=["fp99"])
    monitor.observe("half", torch.tensor([1.0, 2.0**-20], dtype=torch.float16))  # fp16 widens exactly
    monitor.observe("strided", torch.arange(12.0).reshape(3, 4).t())  # not contiguous: counted from a copy
    report = monitor.step()
    assert report["formats"]["fp16"]["activation_grad"]["sites"]["half"]["numel"] == 2
    assert report["formats"]["fp16"]["activation_grad"]["sites"]["strided"]["numel"] == 12
    monitor.close()
    assert not math.isnan(report["loss_scale"])


def test_readme_example_runs(tmp_path, capsys):
    """examples/pytorch_monitor.py (the README's example) runs and writes what it says it writes."""
    import runpy

    argv = sys.argv
    sys.argv = ["pytorch_monitor.py", str(tmp_path / "run")]
    try:
        runpy.run_path(str(ROOT / "examples" / "pytorch_monitor.py"), run_name="__main__")
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    print(out)
    for name in ("steps.csv", "run.json", "underflow.json", "hist/step_000001.json"):
        assert (tmp_path / "run" / name).exists(), name
    rows = list(csv.DictReader(open(tmp_path / "run" / "steps.csv")))
    assert [int(r["step"]) for r in rows] == [1, 11, 21, 31, 41]
    assert all(float(r["scale"]) == 65536.0 for r in rows)  # GradScaler's default init_scale, no growth yet
    assert "fp8_e5m2" in out


def test_one_pass_counts_write_the_files_separate_counters_write(tmp_path, monkeypatch):
    # The monitor counts every format in one pass (mpsim.UnderflowCounter.add_many); a counter per format, each
    # reading the values on its own, must give the same steps.csv, hist/, run.json and underflow.json, byte for
    # byte, for the same seeded run (a 2^14 GradScaler pushes the gradients across every format's edges, a
    # layer big enough for the vector loop, 1200 weights, included).
    def run(out):
        torch.manual_seed(11)
        model = nn.Sequential(nn.Linear(40, 30), nn.ReLU(), nn.Linear(30, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14)
        monitor = mt.GradientMonitor(model, every=2, out=out, scaler=scaler, hist_every=2,
                                     formats=["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "float6_e3m2fn"])
        g = torch.Generator().manual_seed(12)
        for _ in range(7):
            x, y = torch.randn(64, 40, generator=g) * 30, torch.randn(64, 3, generator=g)
            loss = F.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            monitor.step(loss)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        monitor.close()
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    one_pass = run(tmp_path / "one_pass")
    monkeypatch.setattr(mt.monitor.SiteCounts, "add",
                        lambda self, values: [c.add(values) for c in [*self.counters.values(),
                                                                       *(self.mass or {}).values()]])
    separate = run(tmp_path / "separate")
    assert sorted(one_pass) == sorted(separate)
    assert one_pass == separate
    sites = json.loads(one_pass["underflow.json"])["formats"]["fp8_e4m3"]["weight_grad"]["tensors"]
    print(f"one pass vs a counter per format: {len(one_pass)} files identical ({', '.join(sorted(one_pass))}); "
          f"{len(sites)} weight-gradient sites")


def numpy_mass(values, fmt):
    """(non-zero finite, flushed, share of sum |g| flushed, share of sum g^2 flushed, cosine of g and its rounding)
    from torch's own cast into fmt, in numpy double precision (lib/mpsim/analysis/mass_lost.hpp's definitions)."""
    g = values.detach().double().flatten()
    q = g.float().to(TORCH_DTYPE[fmt]).double().numpy()
    g = g.numpy()
    nz = np.isfinite(g) & (g != 0)
    lost = nz & (q == 0)
    a = np.abs(g[nz])
    cos = float(np.dot(g[nz], q[nz]) / (np.linalg.norm(g[nz]) * np.linalg.norm(q[nz])))
    return (int(nz.sum()), int(lost.sum()), float(np.abs(g[lost]).sum() / a.sum()),
            float((g[lost] ** 2).sum() / (a ** 2).sum()), cos)


def test_mass_lost_equals_numpy_per_site_and_for_the_update_direction(tmp_path):
    # A GradScaler at 2^-10 pushes the gradients down to where fp16 flushes some and fp8_e5m2 many.
    model = mlp()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**-10)
    formats = ["fp16", "fp8_e5m2"]
    monitor = mt.GradientMonitor(model, formats=formats, every=1, scaler=scaler, out=tmp_path, mass=True)
    captured = {}

    def capture(i):
        def hook(module, inputs, out):
            out.register_hook(lambda g: captured.__setitem__(f"{i}/out_grad", g.clone()))
        return hook

    for i in (0, 2, 4):
        model[i].register_forward_hook(capture(i))
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 12, generator=g), torch.randn(32, 3, generator=g)
    scaler.scale(F.mse_loss(model(x), y)).backward()
    report = monitor.step()
    monitor.close()
    weights = {f"{n.rpartition('.')[0]}/{n.rpartition('.')[2]}_grad": p.grad.clone() for n, p in model.named_parameters()}
    row = next(csv.DictReader(open(tmp_path / "steps.csv")))
    underflow = json.loads((tmp_path / "underflow.json").read_text())
    keys = ("mass_nonzero_num", "mass_flushed_num", "l1_lost", "l2sq_lost", "cosine")
    compared, worst = 0, 0.0

    def check(got, want, what):
        nonlocal compared, worst
        assert (got["mass_nonzero_num"], got["mass_flushed_num"]) == want[:2], what
        for k, w in zip(keys[2:], want[2:]):
            err = abs(got[k] - w) / max(abs(w), 1e-300)
            worst = max(worst, err)
            assert err < 1e-12, (what, k, got[k], w)
        compared += 1

    flushed = {}
    for fmt in formats:
        act = report["formats"][fmt]["activation_grad"]
        for site, t in captured.items():
            want = numpy_mass(t, fmt)
            check(act["sites"][site], want, f"{fmt} {site}")
            for k, _w in zip(("l1_lost", "l2sq_lost", "cosine"), want[2:]):
                col = f"{site}:{k}" + ("" if fmt == formats[0] else f"@{fmt}")
                assert float(row[col]) == act["sites"][site][k], col  # steps.csv holds the same numbers
            u = next(e for e in underflow["formats"][fmt]["activation_grad"]["tensors"] if e["tensor"] == site)
            check(u, want, f"underflow.json {fmt} {site}")
        check(act["total"], numpy_mass(torch.cat([t.flatten() for t in captured.values()]), fmt), f"{fmt} total")
        # The whole step's update direction: every parameter's gradient as one vector.
        update = numpy_mass(torch.cat([t.flatten() for t in weights.values()]), fmt)
        wg = report["formats"][fmt]["weight_grad"]["total"]
        check(wg, update, f"{fmt} update direction")
        check(underflow["formats"][fmt]["weight_grad"]["total"], update, f"underflow.json {fmt} weight_grad total")
        for k, _w in zip(("l1_lost", "l2sq_lost", "cosine"), update[2:]):
            assert float(row[f"{fmt}:w_{k}"]) == wg[k]
        flushed[fmt] = (wg["mass_flushed_num"], wg["mass_nonzero_num"], wg["l1_lost"], wg["cosine"])
    print(f"mass lost: {compared} site / total entries equal to numpy over torch's casts (worst relative error "
          f"{worst:.3g}); update direction (flushed, of, l1_lost, cosine): {flushed}")
    assert flushed["fp16"][0] > 0 and flushed["fp8_e5m2"][0] > flushed["fp16"][0]


def test_mass_formats_default_and_bad_names():
    """mass=None (the default) measures the first format only, mass=False none; a format outside formats is
    refused by name."""
    model = mlp()
    x, y = torch.randn(8, 12), torch.randn(8, 3)
    measured = {}
    for mass in (None, False, True):
        monitor = mt.GradientMonitor(model, formats=["bf16", "fp8_e4m3"], every=1, mass=mass)
        F.mse_loss(model(x), y).backward()
        report = monitor.step()
        model.zero_grad()
        monitor.close()
        measured[mass] = [f for f in ("bf16", "fp8_e4m3")
                          if "l1_lost" in report["formats"][f]["weight_grad"]["total"]]
    print(f"formats with the mass lost: {measured}")
    assert measured == {None: ["bf16"], False: [], True: ["bf16", "fp8_e4m3"]}
    with pytest.raises(ValueError, match="fp16, not among formats bf16"):
        mt.GradientMonitor(model, formats=["bf16"], mass=["fp16"])


def edge_values(seed, n=3000):
    """Log-uniform values with every edge of the monitor's formats among them: ±0, float32 subnormals, fp16's
    flush boundary 2^-25 (a tie: rounds to zero) and its neighbours, fp16's overflow boundary 65520 (rounds to
    inf) and its neighbours, e4m3's largest finite 448 and 464 (the first value it cannot hold), ±inf, NaN."""
    edges = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-39, 2.0**-25, -(2.0**-25), 2.0**-25 * (1 + 2.0**-23),
                          2.0**-25 * (1 - 2.0**-24), 65504.0, 65520.0, -65520.0, 65519.996, 448.0, 464.0, -464.0,
                          float("inf"), float("-inf"), float("nan")], dtype=torch.float32)
    v = log_uniform(n, -40, 20, seed)
    return torch.cat([v[: n // 2], edges, v[n // 2:]])


def test_counters_reused_between_sampled_steps_count_as_new_ones(tmp_path, monkeypatch):
    # step() clears a site's counters after merging them into the totals and the site's next sampled step counts
    # into them (SiteCounts.clear: UnderflowCounter.clear, MassLostCounter.clear). Tensors with every edge, at
    # sites that come and go between steps: each step's shares must equal torch's casts, and every report and
    # file must equal those of a monitor that makes new counters for every step, byte for byte.
    formats = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    plan = [("a", "b", "w"), ("a", "w"), ("b", "c", "w"), ("a", "b", "c", "w")]

    def run(out):
        monitor = mt.GradientMonitor(nn.Linear(2, 2), formats=formats, every=1, out=out, hist_every=2, mass=True,
                                     activation_grads=False, weight_grads=False)
        reports, compared = [], 0
        for step, sites in enumerate(plan):
            for i, site in enumerate(sites):
                values = edge_values(100 * step + i)
                monitor.observe(site, values, kind="weight_grad" if site == "w" else "activation_grad")
            reports.append(monitor.step(loss=float(step)))
            act = reports[-1]["formats"]
            for i, site in enumerate(s for s in sites if s != "w"):
                values = edge_values(100 * step + i)
                for fmt in formats:
                    st = act[fmt]["activation_grad"]["sites"][site]
                    want = list(torch_shares(values, fmt))
                    if fmt == "fp8_e4m3":  # torch's e4m3fn cast saturates; |x| > 464 rounds past 448 (see above)
                        finite = values[torch.isfinite(values) & (values != 0)]
                        want[2] = float((finite.abs() > 464).sum()) / finite.numel()
                    assert [st["zero"], st["subnormal"], st["overflow"]] == want, (step, site, fmt)
                    compared += 1
        monitor.close()
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        return reports, files, compared, monitor

    reused, reused_files, compared, mon = run(tmp_path / "reused")
    assert mon._spare, "no counters were reused"

    class NoSpare(dict):
        def __setitem__(self, key, value):  # never keeps a cleared SiteCounts: every step makes new ones
            pass

    monkeypatch.setattr(mt.GradientMonitor, "_spare", property(lambda self: NoSpare(), lambda self, v: None), raising=False)
    fresh, fresh_files, _, mon2 = run(tmp_path / "fresh")
    assert not mon2._spare
    assert reused == fresh
    assert sorted(reused_files) == sorted(fresh_files) and reused_files == fresh_files
    # Each histogram file holds its own step's values (the counters are cleared only after it is written):
    # bin for bin numpy's binning of what that step observed.
    binned = 0
    for name, text in reused_files.items():
        if not name.startswith("hist/"):
            continue
        snap = json.loads(text)
        sites = plan[snap["step"] - 1]
        for i, site in enumerate(sites):
            kind = "weight_grad" if site == "w" else "activation_grad"
            got = {n: c for n, c in snap[kind][site]["bins"]}
            assert got == numpy_bins(edge_values(100 * (snap["step"] - 1) + i)), (name, site)
            binned += 1
    assert binned >= 6
    print(f"reused counters: {len(plan)} sampled steps of tensors with every edge ({edge_values(0).numel()} values "
          f"each), {compared} per-site shares equal to torch's casts; {len(reused)} reports and {len(reused_files)} "
          f"files equal to those of new counters every step, byte for byte; {binned} histogram sites binned as numpy "
          f"bins their step's values")
