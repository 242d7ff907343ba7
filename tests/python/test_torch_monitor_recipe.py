"""GradientMonitor under emulate(model, recipe=...): per LAYER/ROLE, what the recipe flushed, made subnormal and
saturated in its own formats, and the gradient mass it lost (docs/torch.md#recipes), against an independent count.

The reference takes each operand the recipe quantized and the scales it chose (Recipe.quantize's "scales",
captured by an observer of the test's own), applies the scale with numpy (fp8 recipes: x * scale, torchao's
float8_training_tensor.py 153-154; MX: x / 2^k; nvfp4: x / (T * S) in float32, torchao's nvfp4 arithmetic,
docs/recipes.md), rounds the scaled operand to the element format with ml_dtypes' casts (round to nearest even,
an implementation of its own) and counts: the non-zero finite values, those that became 0, those that became
subnormal, those beyond the element's largest finite value. The monitor's integer counts must equal these bit for
bit, on the sampled steps only; its l1_lost / l2sq_lost against numpy's shares of the operand and the values the
GEMM multiplied."""
import csv
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
from torch import nn  # noqa: E402

import mpsim  # noqa: E402
import mpsim.torch as mt  # noqa: E402

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
# The element formats per recipe at its default options, (x and w, dy): docs/recipes.md's table (HYBRID: dy in
# e5m2 for the tensorwise recipes; torchao's rowwise and TE's blockwise and MXFP8 keep e4m3 everywhere).
ELEMENTS = {
    "fp8-none": (E4M3, E5M2),
    "fp8-tensorwise-current": (E4M3, E5M2),
    "fp8-tensorwise-delayed": (E4M3, E5M2),
    "fp8-rowwise": (E4M3, E4M3),
    "fp8-blockwise": (E4M3, E4M3),
    "mxfp8": (E4M3, E4M3),
    "mxfp6_e2m3": (ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e2m3fn),
    "mxfp4": (ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn),
    "nvfp4": (ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn),
}
# The block length along the reduction axis (and of a 2-D tile's side): docs/recipes.md.
BLOCK = {"fp8-blockwise": 128, "mxfp8": 32, "mxfp6_e2m3": 32, "mxfp4": 32, "nvfp4": 16}
# One recipe per scale rule (per tensor from the history, per row, per 1x128 tile / 128x128 block, per MX block,
# nvfp4's two levels with its Hadamard-transformed wgrad); nvfp4's stochastic rounding has no independent count.
SPECS = ["fp8-tensorwise-delayed", "fp8-rowwise", "fp8-blockwise", "mxfp6_e2m3", "nvfp4:sr=0"]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(48, 40), nn.ReLU(), nn.Linear(40, 24))


def batch(step, n=36):
    """Inputs spread over 2^-24 .. 2^4 so that every recipe flushes some elements of x and of the gradients."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(n, 48, generator=g) * torch.exp2(torch.empty(n, 48).uniform_(-24, 4, generator=g))
    return x, torch.randn(n, 24, generator=g)


def expand(scales, rows, cols, tile):
    """The (rows, cols) array of each element's scale from Recipe.quantize's (scale_rows, scale_cols) grid: one
    per tensor, per row, per 1 x tile block along the row, or per tile x tile square (nvfp4's and blockwise's w)."""
    sr, sc = scales.shape
    br = 1 if sr == rows else (rows if sr == 1 else tile)
    bc = cols if sc == 1 else tile
    return np.repeat(np.repeat(scales, br, axis=0)[:rows], bc, axis=1)[:, :cols]


def independent_counts(name, role, operand, got):
    """(nonzero finite, underflow, subnormal, overflow) of the scaled operand rounded by ml_dtypes."""
    a = operand.numpy().astype(np.float32)
    rows, cols = a.shape
    if got["hadamard"]:  # nvfp4's wgrad operands are quantized after the transform (docs/recipes.md)
        a = mpsim._core.hadamard16(np.ascontiguousarray(a))
    s = expand(np.asarray(got["scales"]), rows, cols, BLOCK.get(name, 1)).astype(np.float32)
    scaled = a * s if name.startswith("fp8") else a / s  # float32 arithmetic, as the C++ (block.cpp 243-265)
    element = ELEMENTS[name][1 if role.endswith("_dy") else 0]
    info = ml_dtypes.finfo(element)
    finite = np.isfinite(scaled) & (scaled != 0)
    v = scaled[finite]
    r = v.astype(element).astype(np.float32)
    under = int((r == 0).sum())
    sub = int(((r != 0) & (np.abs(r) < float(info.smallest_normal))).sum())
    over = int((np.abs(v) > float(info.max)).sum())
    return int(finite.sum()), under, sub, over


@pytest.mark.parametrize("spec", SPECS)
def test_counts_equal_the_scaled_operands_rounded_independently(spec, tmp_path):
    name = spec.split(":")[0]
    model = mlp()
    e = mt.emulate(model, recipe=spec)
    monitor = mt.GradientMonitor(model, formats=["fp16"], every=2, emulation=e, out=tmp_path, hist_every=1)
    captured = []  # (step, LAYER/ROLE, operand, got) of every quantization
    step = [1]
    e.quantize_observers.append(lambda site, a, got: captured.append((step[0], site, a.clone(), dict(got))))
    results = []
    for k in range(1, 4):  # steps 1 and 3 sampled (every=2)
        step[0] = k
        x, t = batch(k)
        loss = nn.functional.mse_loss(model(x), t)
        loss.backward()
        if k == 1:
            with torch.no_grad():
                model(x * 1000)  # an evaluation forward on a sampled step: not a training step's, not counted
        e.step()
        results.append(monitor.step(loss))
        with torch.no_grad():  # SGD written out: torch.optim's first step imports torch._dynamo (seconds)
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
    monitor.close()
    assert results[1] is None and results[0]["recipe"]["spec"] == e.recipe.spec

    want = {}  # (step, site) -> counts
    for k, site, a, got in captured:
        if not got["record"] or k == 2:
            continue
        role = site.rpartition("/")[2]
        c = independent_counts(name, role, a, got)
        old = want.get((k, site), (0, 0, 0, 0))
        want[(k, site)] = tuple(u + v for u, v in zip(old, c))
    keys = ("nonzero_finite_num", "underflows_num", "subnormals_num", "overflows_num")
    mismatches, compared, flushed, saturated = [], 0, 0, 0
    for (k, site), c in sorted(want.items()):
        st = results[0 if k == 1 else 2]["recipe"]["sites"][site]
        got = tuple(st[key] for key in keys)
        compared += c[0]
        flushed += c[1]
        saturated += c[3]
        if got != c:
            mismatches.append((k, site, got, c))
    sites = sorted({s for _, s in want})
    print(f"{spec}: {len(sites)} operands x 2 sampled steps, {compared} non-zero values; flushed {flushed}, "
          f"saturated {saturated}; "
          f"{len(mismatches)} mismatches {mismatches[:3]}")
    assert not mismatches and flushed > 0
    assert sorted(results[0]["recipe"]["sites"]) == sites

    # The mass lost of the run totals against numpy's shares over both sampled steps.
    report = json.loads((tmp_path / "underflow.json").read_text())["recipe"]
    worst = 0.0
    for site in sites:
        calls = [(a.numpy().astype(np.float64).ravel(), got["values"].astype(np.float64).ravel())
                 for k, s, a, got in captured if s == site and k != 2 and got["record"]]
        st = report["sites"][site]
        if not captured_quantized(captured, site):
            assert "l1_lost" not in st
            continue
        g = np.concatenate([c[0] for c in calls])
        q = np.concatenate([c[1] for c in calls])
        nz = np.isfinite(g) & (g != 0)
        lost = nz & (q == 0)
        l1 = np.abs(g[lost]).sum() / np.abs(g[nz]).sum()
        l2 = (g[lost] ** 2).sum() / (g[nz] ** 2).sum()
        worst = max(worst, abs(l1 - st["l1_lost"]), abs(l2 - st["l2sq_lost"]))
        assert st["mass_flushed_num"] == int(lost.sum()) and st["mass_nonzero_num"] == int(nz.sum())
        assert st["underflows_num"] == sum(want[(k, site)][1] for k in (1, 3))
    print(f"{spec}: mass lost of {len(sites)} operands over the run, worst difference to numpy {worst:.3g}; "
          f"total l1_lost {report['total'].get('l1_lost')}, gradients' {report['dy_total'].get('l1_lost')}")
    assert worst < 1e-12

    # steps.csv: the per-operand shares and the totals of each sampled step, as step() returned them.
    rows = list(csv.DictReader(open(tmp_path / "steps.csv")))
    assert [r["step"] for r in rows] == ["1", "3"]
    for row, res in zip(rows, (results[0], results[2])):
        rec = res["recipe"]
        for site in sites:
            assert float(row[f"{site}:zero@recipe"]) == rec["sites"][site]["zero"]
        assert float(row["recipe:underflow"]) == rec["total"]["zero"]
        assert float(row["recipe:dy_underflow"]) == rec["dy_total"]["zero"]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["config"]["recipe"] == e.recipe.spec


def captured_quantized(captured, site):
    return any(s == site and got["quantized"] and not got["hadamard"] for _, s, _, got in captured)


def test_totals_and_remove():
    """The total is the sum of the operands' counts (sorted order), dy_total that of dgrad_dy and wgrad_dy; after
    remove() the emulation has no observer of the monitor's and nothing more is counted."""
    model = mlp()
    e = mt.emulate(model, recipe="mxfp4")
    monitor = mt.GradientMonitor(model, formats=["fp8_e5m2"], every=1, emulation=e)
    x, t = batch(1)
    nn.functional.mse_loss(model(x), t).backward()
    res = monitor.step()["recipe"]
    sites = res["sites"]
    for total, pick in (("total", lambda s: True), ("dy_total", lambda s: s.endswith("_dy"))):
        for key in ("count", "nonzero_finite_num", "underflows_num", "subnormals_num", "overflows_num"):
            assert res[total][key] == sum(st[key] for s, st in sites.items() if pick(s))
    print(f"mxfp4: {len(sites)} operands, total underflow {res['total']['underflows_num']} of "
          f"{res['total']['nonzero_finite_num']}, gradients' {res['dy_total']['underflows_num']}")
    assert len(e.quantize_observers) == 1
    monitor.remove()
    assert e.quantize_observers == []
    nn.functional.mse_loss(model(x), t).backward()
    assert monitor._recipe_counts == {}
