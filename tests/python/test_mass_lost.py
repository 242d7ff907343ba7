"""The gradient mass lost (lib/mpsim/analysis/mass_lost.hpp) as `mpsim underflow --json` reports it, against
numpy: the share of sum |g| and of sum g^2 that a format flushes to zero under a scale, and the cosine between
the scaled tensor and its rounding, per tensor and for all tensors together. The rounding of the reference is
not mpsim's: numpy's float16 cast for fp16 (float32 and float64 input), a bit-level nearest-even for bf16 written
here, and torch's float8_e5m2 cast where torch imports."""
import math

import numpy as np
import pytest

RNG_SEED = 20261128


def gradients():
    """Tensors like activation gradients: log-normal magnitudes across fp16's subnormal range and below it,
    zeros, a NaN and an inf (left out of every sum), float64 input, a tensor fp16 flushes completely (cosine
    undefined) and one with a value beyond fp16's range (overflow: cosine undefined)."""
    rng = np.random.default_rng(RNG_SEED)
    a = (rng.standard_normal(20000) * np.exp(rng.normal(-17, 3, 20000))).astype(np.float32)
    a[:40] = 0
    a[50] = np.nan
    a[51] = -np.inf
    b = (rng.standard_normal((64, 33)) * 1e-6).astype(np.float32)
    c = (rng.standard_normal(5000) * np.exp(rng.normal(-16, 4, 5000))).astype(np.float64)
    gone = (rng.standard_normal(100) * 1e-12).astype(np.float32)
    over = (rng.standard_normal(100) * 1e-3).astype(np.float32)
    over[7] = 1e6
    return {"a": a, "b": b, "c": c, "gone": gone, "over": over}


def bf16_nearest_even(x):
    """float32 -> bf16 -> float32 by the bit rule: add 0x7fff plus the lowest kept bit, truncate 16 bits
    (finite inputs; the carry into the exponent is the rounding up to the next binade or to inf)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(np.float32)


def reference_rounding(fmt):
    if fmt == "fp16":
        return lambda x: x.astype(np.float16).astype(x.dtype)
    if fmt == "bf16":
        return lambda x: bf16_nearest_even(x.astype(np.float32)).astype(x.dtype)
    if fmt == "fp8_e5m2":
        torch = pytest.importorskip("torch")
        return lambda x: torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.float8_e5m2).float().numpy()
    raise ValueError(fmt)


def measures(g, q):
    """(nonzero, flushed, l1_lost, l2sq_lost, cosine) over the finite non-zero g, in float64 sums (math.fsum:
    exact, then one rounding), the cosine None where undefined."""
    g = np.asarray(g, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    keep = np.isfinite(g) & (g != 0)
    g, q = g[keep], q[keep]
    flushed = q == 0
    fin = np.isfinite(q)
    s_abs, s_sq = math.fsum(np.abs(g)), math.fsum(g * g)
    l1 = math.fsum(np.abs(g[flushed])) / s_abs if s_abs else 0.0
    l2 = math.fsum(g[flushed] ** 2) / s_sq if s_sq else 0.0
    qq = math.fsum(q[fin] ** 2)
    cos = None
    if fin.all() and s_sq > 0 and qq > 0:
        cos = math.fsum(g * q) / (math.sqrt(s_sq) * math.sqrt(qq))
    return int(keep.sum()), int(flushed.sum()), l1, l2, cos


@pytest.mark.parametrize("fmt,scale", [("fp16", 1.0), ("fp16", 1024.0), ("bf16", 1.0), ("fp8_e5m2", 65536.0)])
def test_mass_lost_against_numpy(cli, fmt, scale):
    data = gradients()
    if fmt == "fp8_e5m2":  # keep to tensors inside e5m2's range: overflow is fp16's case's to test
        data = {k: v for k, v in data.items() if k in ("a", "b", "gone")}
    rnd = reference_rounding(fmt)
    report = cli.report("underflow", data, "--format", fmt, "--scale", scale)
    by_name = {t["tensor"].split(":")[-1]: t for t in report["tensors"]}
    all_g, all_q = [], []
    worst = 0.0
    for name, x in data.items():
        xs = x.astype(np.float64) * scale  # exact: a power-of-two scale of values far from the range's ends
        finite = np.isfinite(xs)
        q = np.where(finite, rnd(np.where(finite, xs, 0).astype(x.dtype if x.dtype == np.float64 else np.float32)), 0)
        want = measures(xs[finite], q[finite])
        all_g.append(xs[finite])
        all_q.append(q[finite])
        got = by_name[name]
        assert (got["mass_nonzero_num"], got["mass_flushed_num"]) == want[:2], name
        for key, w in zip(("l1_lost", "l2sq_lost"), want[2:4]):
            assert got[key] == pytest.approx(w, rel=1e-12, abs=1e-300), (name, key)
            worst = max(worst, abs(got[key] - w) / w if w else abs(got[key]))
        if want[4] is None:
            assert got["cosine"] is None, name
        else:
            assert got["cosine"] == pytest.approx(want[4], abs=1e-12), name
            worst = max(worst, abs(got["cosine"] - want[4]))
        # The flushed count is the underflow count of the same report.
        assert got["mass_flushed_num"] == got["underflows_num"], name
        print(f"{fmt} x {scale:g} {name}: {want[0]} non-zero, {want[1]} flushed, |g| lost {want[2]:.6g}, "
              f"g^2 lost {want[3]:.6g}, cosine {want[4]}")
    want = measures(np.concatenate(all_g), np.concatenate(all_q))
    total = report["total"]
    assert (total["mass_nonzero_num"], total["mass_flushed_num"]) == want[:2]
    assert total["l1_lost"] == pytest.approx(want[2], rel=1e-12)
    assert total["l2sq_lost"] == pytest.approx(want[3], rel=1e-12)
    assert (total["cosine"] is None) == (want[4] is None)
    if want[4] is not None:
        assert total["cosine"] == pytest.approx(want[4], abs=1e-12)
    print(f"{fmt} x {scale:g}: {len(data)} tensors and their total against numpy, worst relative difference "
          f"{worst:.3g}")


def test_binding_same_as_cli(cli):
    """mpsim._core.mass_lost (python/src/analysis.cpp) gives the fields `mpsim underflow` writes, bit for bit."""
    import mpsim

    data = gradients()
    report = cli.report("underflow", data, "--format", "fp16", "--scale", 1024.0)
    keys = ("mass_nonzero_num", "mass_flushed_num", "l1_lost", "l2sq_lost", "cosine")
    for name, entry in zip(data, report["tensors"]):
        x = data[name]
        got = mpsim._core.mass_lost(x if x.dtype != np.float16 else x.astype(np.float32), "fp16", 10)
        assert {k: got[k] for k in keys} == {k: entry[k] for k in keys}, name
    print(f"mpsim._core.mass_lost on {len(data)} tensors: the same fields as `mpsim underflow --json`")
