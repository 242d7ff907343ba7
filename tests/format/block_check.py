#!/usr/bin/env python3
"""mpsim's block formats against independent references, through `mpsim round`.

MX formats (mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4_e2m1): Graphcore's gfloat (PyPI), whose
quantize_block with compute_scale_amax implements OCP MX v1.0 (scale 2^(floor(log2 amax) - emax_elem),
clipped to 2^-127 .. 2^127; elements rounded and saturated), in five rounding modes; the scales `--bits`
writes against gfloat's scale. With --block-scale rceil the scale is the smallest power of two keeping
amax within the element max (checked by exact float64 comparisons here), the elements again by gfloat.

nvfp4: a numpy transcription of torchao's _nvfp4_quantize with a per-tensor scale
(torchao/prototype/mx_formats/nvfp4_tensor.py): float32 arithmetic step by step, the e4m3fn and e2m1
casts by ml_dtypes.

Rows of 100 elements (three full blocks of 32 and a short one of 4; for nvfp4 six of 16 and one of 4)
holding blocks of every kind: a wide range of magnitudes, one outlier, all zero, float32 subnormals,
exact small integers, and random normal values. `mpsim hist` and `mpsim rounding-error` with a block format are
checked against the same references. Prints what it compared; exit status 1 on any mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gfloat
    import gfloat.formats as gf
    import ml_dtypes
except ImportError as e:
    sys.exit(f"block_check: {e.name} is not installed in this Python; run ./run deps")

MX = {
    "mxfp8_e4m3": gf.format_info_mxfp8_e4m3, "mxfp8_e5m2": gf.format_info_mxfp8_e5m2,
    "mxfp6_e2m3": gf.format_info_mxfp6_e2m3, "mxfp6_e3m2": gf.format_info_mxfp6_e3m2,
    "mxfp4_e2m1": gf.format_info_mxfp4_e2m1,
}
MODES = {"rne": gfloat.RoundMode.TiesToEven, "rtz": gfloat.RoundMode.TowardZero,
         "ru": gfloat.RoundMode.TowardPositive, "rd": gfloat.RoundMode.TowardNegative,
         "rna": gfloat.RoundMode.TiesToAway}
ROW = 100


def test_rows(rng):
    """Rows of ROW float32 values; each 32-element stretch is one kind of block."""
    kinds = []
    wide = (rng.standard_normal(ROW) * np.exp2(rng.integers(-60, 60, ROW))).astype(np.float32)
    kinds.append(wide)
    outlier = (rng.standard_normal(ROW) * 1e-3).astype(np.float32)
    outlier[::17] = 3.0e4
    kinds.append(outlier)
    kinds.append(np.zeros(ROW, np.float32))
    sub = rng.integers(1, 1 << 23, ROW, dtype=np.uint32).view(np.float32) * np.where(rng.random(ROW) < .5, -1, 1)
    kinds.append(sub.astype(np.float32))
    kinds.append(rng.integers(-8, 9, ROW).astype(np.float32))
    mixed = (rng.standard_normal(ROW) * np.exp2(rng.integers(-10, 10, ROW))).astype(np.float32)
    mixed[:32] = 0
    mixed[40] = 2.0**-140
    kinds.append(mixed)
    for _ in range(10):
        kinds.append((rng.standard_normal(ROW) * 10.0 ** rng.uniform(-30, 30)).astype(np.float32))
    huge = (rng.standard_normal(ROW) * 1e38).astype(np.float32)
    kinds.append(huge)
    return np.stack(kinds)


def blocks_of(row, k):
    return [row[i:i + k] for i in range(0, len(row), k)]


def rceil_scale(fi, vals):
    amax = float(np.max(np.abs(vals)))
    if amax == 0:
        return 2.0**-127
    m = float(fi.etype.max)
    k = int(np.floor(np.log2(amax))) - int(np.floor(np.log2(m))) - 1
    while amax > m * 2.0**k:
        k += 1
    return 2.0 ** min(max(k, -127), 127)


def mpsim_round(mpsim, fmt, x, work, mode="rne", extra=()):
    src, val, bits = (os.path.join(work, n) for n in ("in.npy", "out.npy", "bits.npz"))
    np.save(src, x)
    for out, flag in ((val, []), (bits, ["--bits"])):
        subprocess.run([mpsim, "round", "--to", fmt, "--mode", mode, *extra, *flag, src, out], check=True,
                       stdout=subprocess.DEVNULL)
    z = np.load(bits)
    return np.load(val), {k: z[k] for k in z}


def check_mx(mpsim, x, work):
    bad = total = 0
    for name, fi in MX.items():
        for rule in ("floor", "rceil"):
            for mode, gmode in MODES.items():
                if rule == "rceil" and mode != "rne":
                    continue
                got, enc = mpsim_round(mpsim, name, x, work, mode, ["--block-scale", rule])
                scale_fn = gfloat.compute_scale_amax if rule == "floor" else (lambda emax, v, fi=fi: rceil_scale(fi, v))
                want = np.empty(x.shape, np.float64)
                want_scales = []
                for r, row in enumerate(x):
                    col = 0
                    for blk in blocks_of(row.astype(np.float64), 32):
                        want[r, col:col + len(blk)] = gfloat.quantize_block(fi, blk, scale_fn, gmode)
                        want_scales.append(scale_fn(fi.etype.emax, blk))
                        col += len(blk)
                got_scales = enc["scales"].ravel().view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
                # mpsim writes float32: gfloat's float64 value rounded to float32 (an rceil element of 4 * 2^126
                # is 2^128, inf in float32).
                want = want.astype(np.float32).astype(np.float64)
                diff = int(np.sum(got.astype(np.float64) != want))
                sdiff = int(np.sum(got_scales != np.array(want_scales)))
                total += x.size
                bad += diff + sdiff
                print(f"{name:11s} {rule:5s} {mode:3s}: {x.size} elements, {len(want_scales)} blocks vs gfloat "
                      f"{gfloat.__version__ if hasattr(gfloat, '__version__') else ''}: {diff} element mismatches, "
                      f"{sdiff} scale mismatches")
                if diff:
                    i = np.argwhere(got.astype(np.float64) != want)[0]
                    print(f"    first at {tuple(i)}: input {x[tuple(i)]!r}, mpsim {got[tuple(i)]!r}, gfloat {want[tuple(i)]!r}")
    return bad, total


def nvfp4_reference(x):
    """torchao _nvfp4_quantize(per_tensor_scale = amax / (448 * 6)) in numpy float32, dequantized."""
    f32 = np.float32
    amax = np.max(np.abs(x))
    t = f32(amax) / (f32(448.0) * f32(6.0)) if amax > 0 else f32(1.0)
    out = np.empty_like(x)
    scales = []
    for r, row in enumerate(x):
        col = 0
        for blk in blocks_of(row, 16):
            bs = np.max(np.abs(blk)) / f32(6.0)
            sbs = np.clip(f32(bs / t), f32(0.015625), f32(448.0))
            s8 = np.array([sbs], f32).astype(ml_dtypes.float8_e4m3fn)
            total = f32(t * s8.astype(f32)[0])
            scaled = np.clip((blk / total).astype(f32), f32(-6.0), f32(6.0))
            e = scaled.astype(ml_dtypes.float4_e2m1fn).astype(f32)
            out[r, col:col + len(blk)] = e * total
            scales.append(s8.view(np.uint8)[0])
            col += len(blk)
    return out, np.array(scales, np.uint8), t


def check_nvfp4(mpsim, x, work):
    got, enc = mpsim_round(mpsim, "nvfp4", x, work)
    want, want_scales, t = nvfp4_reference(x)
    diff = int(np.sum(got.view(np.uint32) != want.view(np.uint32)))
    sdiff = int(np.sum(enc["scales"].ravel() != want_scales))
    tdiff = int(enc["tensor_scale"][0] != t)
    print(f"nvfp4      : {x.size} elements, {len(want_scales)} blocks vs torchao's algorithm (numpy + ml_dtypes): "
          f"{diff} element mismatches, {sdiff} scale mismatches, tensor scale {'ok' if not tdiff else 'MISMATCH'}")
    return diff + sdiff + tdiff, x.size


def check_telemetry(mpsim, x, work):
    """`mpsim underflow --format mxfp8_e4m3,mxfp4_e2m1,fp8_e4m3,fp16 --scale 1024 --json`: the counts of every
    format against the same counts taken from gfloat's blocks, ml_dtypes' per-tensor fp8 and numpy's fp16."""
    src, out = os.path.join(work, "t.npy"), os.path.join(work, "t.json")
    np.save(src, x)
    subprocess.run([mpsim, "underflow", "--format", "mxfp8_e4m3,mxfp4_e2m1,fp8_e4m3,fp16", "--scale", "1024", src,
                    "--json", out], check=True, stdout=subprocess.DEVNULL)
    got = {f["format"]: f for f in json.load(open(out))["tensors"][0]["formats"]}
    nz = np.isfinite(x) & (x != 0)
    want = {}
    for name in ("mxfp8_e4m3", "mxfp4_e2m1"):
        fi = MX[name]
        fl = sub = sat = 0
        for row in x:
            for blk in blocks_of(row.astype(np.float64), 32):
                scale = gfloat.compute_scale_amax(fi.etype.emax, blk)
                elem = gfloat.quantize_block(fi, blk, gfloat.compute_scale_amax) / scale
                bnz = blk != 0
                fl += int(np.sum(bnz & (elem == 0)))
                sub += int(np.sum(bnz & (elem != 0) & (np.abs(elem) < fi.etype.smallest_normal)))
                sat += int(np.sum(np.abs(blk) / scale > fi.etype.max))
        want[name] = (fl, sub, sat)
    s = np.float32(448.0) / np.max(np.abs(x))
    e = (x * s).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    want["fp8_e4m3"] = (int(np.sum(nz & (e == 0))), int(np.sum(nz & (e != 0) & (np.abs(e) < 2.0**-6))), 0)
    with np.errstate(over="ignore"):
        h = (x * np.float32(1024)).astype(np.float32).astype(np.float16)
    want["fp16"] = (int(np.sum(nz & (h == 0))), int(np.sum(nz & (h != 0) & (np.abs(h) < 2.0**-14))),
                    int(np.sum(nz & np.isinf(h))))
    bad = 0
    for name, (fl, sub, sat) in want.items():
        g = got[name]
        ok = (g["flushed_num"], g["subnormal_num"], g["saturated_num"]) == (fl, sub, sat)
        bad += not ok
        print(f"underflow telemetry {name:11s} ({g['scaling']}): flushed {g['flushed_num']} / subnormal "
              f"{g['subnormal_num']} / saturated {g['saturated_num']} of {g['nonzero_finite_num']} vs reference "
              f"{fl} / {sub} / {sat}: {'match' if ok else 'MISMATCH'}")
    return bad, 4 * x.size


def log2_bins(v):
    """{floor(log2|v|): count} over the finite non-zero values (frexp: exact), and the zero count."""
    v = np.asarray(v, np.float64).ravel()
    nz = v[np.isfinite(v) & (v != 0)]
    _, e = np.frexp(np.abs(nz))
    bins = {}
    for k, c in zip(*np.unique(e - 1, return_counts=True)):
        bins[int(k)] = int(c)
    return bins, int(np.sum(v == 0))


def check_hist_and_rounding_error(mpsim, x, work):
    """`mpsim hist --format <block>`: the log2 histogram of the dequantized values against the same bins of
    gfloat's (MX) and the numpy transcription of torchao's (nvfp4) dequantized values; `mpsim rounding-error
    --format <MX>`: measured count, relative error (mean, max), ulp error (max, in the element type's ulps inside
    each block) and relative bias against the same statistics of gfloat's blocks."""
    src, out = os.path.join(work, "h.npy"), os.path.join(work, "h.json")
    np.save(src, x)
    bad = 0
    for name in ("mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"):
        subprocess.run([mpsim, "hist", "--format", name, src, "--json", out], check=True, stdout=subprocess.DEVNULL)
        t = json.load(open(out))["tensors"][0]
        if name == "nvfp4":
            want = nvfp4_reference(x)[0]
        else:
            want = np.concatenate([np.concatenate([gfloat.quantize_block(MX[name], blk, gfloat.compute_scale_amax)
                                                   for blk in blocks_of(row.astype(np.float64), 32)]) for row in x])
            want = want.astype(np.float32)
        bins, zeros = log2_bins(want)
        got_bins = {int(k): int(c) for k, c in t["histogram"]["bins"]}
        ok = got_bins == bins and t["histogram"]["zero"] == zeros and t["zero_num"] == zeros
        bad += not ok
        print(f"hist --format {name:10s}: {len(bins)} log2 bins and {zeros} zeros of the dequantized values vs the "
              f"reference's: {'match' if ok else 'MISMATCH'}")
    for name in ("mxfp8_e4m3", "mxfp4_e2m1"):
        fi = MX[name]
        emin = int(np.log2(float(fi.etype.smallest_normal)))
        man = fi.etype.precision - 1
        rel, ulp, bias = [], [], []
        for row in x:
            for blk in blocks_of(row.astype(np.float64), 32):
                scale = gfloat.compute_scale_amax(fi.etype.emax, blk)
                elem = gfloat.quantize_block(fi, blk, gfloat.compute_scale_amax) / scale
                m = np.isfinite(blk) & (blk != 0)
                y = blk[m] / scale
                d = elem[m] - y
                _, e = np.frexp(np.abs(y))
                rel.append(np.abs(d) / np.abs(y))
                ulp.append(np.abs(d) / np.exp2(np.maximum(e - 1, emin) - man))
                bias.append(d / np.abs(y))
        rel, ulp, bias = (np.concatenate(a) for a in (rel, ulp, bias))
        subprocess.run([mpsim, "rounding-error", "--format", name, "--modes", "rne", src, "--json", out], check=True,
                       stdout=subprocess.DEVNULL)
        g = json.load(open(out))["tensors"][0]["modes"][0]
        ok = (g["measured_num"] == rel.size and np.isclose(g["rel_err_mean"], rel.mean(), rtol=1e-12, atol=0)
              and g["rel_err_max"] == rel.max() and g["ulp_err_max"] == ulp.max()
              and np.isclose(g["ulp_err_mean"], ulp.mean(), rtol=1e-12, atol=0)
              and np.isclose(g["bias_rel"], bias.mean(), rtol=1e-9, atol=1e-15))
        bad += not ok
        print(f"rounding-error --format {name}: {g['measured_num']} values, rel err mean {g['rel_err_mean']:.6g} max "
              f"{g['rel_err_max']:.6g}, ulp max {g['ulp_err_max']:.6g}, bias {g['bias_rel']:.3g} vs gfloat {rel.size}, "
              f"{rel.mean():.6g}, {rel.max():.6g}, {ulp.max():.6g}, {bias.mean():.3g}: {'match' if ok else 'MISMATCH'}")
    return bad, 5 * x.size


def main():
    mpsim = os.environ.get("MPSIM_BIN") or (sys.argv[1] if len(sys.argv) > 1 else None)
    if not mpsim:
        sys.exit("block_check: set MPSIM_BIN or pass the mpsim executable")
    rng = np.random.default_rng(26)
    x = test_rows(rng)
    bad = total = 0
    with tempfile.TemporaryDirectory(prefix="mpsim-block-") as work:
        for check in (check_mx, check_nvfp4, check_telemetry, check_hist_and_rounding_error):
            b, t = check(mpsim, x, work)
            bad += b
            total += t
        # NaN and inf inside a block: the whole block is NaN, its scale the NaN encoding (docs/formats.md).
        y = x[:2].copy()
        y[0, 3] = np.nan
        y[1, 70] = np.inf
        got, enc = mpsim_round(mpsim, "mxfp8_e4m3", y, work)
        ok = (np.isnan(got[0, :32]).all() and np.isfinite(got[0, 32:]).all() and np.isnan(got[1, 64:96]).all()
              and enc["scales"][0, 0] == 0xFF and enc["scales"][1, 2] == 0xFF)
        print(f"NaN / inf blocks: {'NaN block, 0xFF scale, neighbours finite' if ok else 'WRONG'}")
        bad += not ok
    print(f"{total} element roundings compared, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
