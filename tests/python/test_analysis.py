"""mpsim.Histogram and mpsim.UnderflowCounter against `mpsim hist` / `mpsim underflow` on the same data (identical
JSON, the tensor labels apart: the command line names a tensor of an .npz 'file.npz:name'), merging, `+`, pickling
and the flat int64 counts round trip."""
import functools
import json
import math
import operator
import pickle

import numpy as np
import pytest

import mpsim

RNG_SEED = 20261125
MASS_LOST_KEYS = ("mass_nonzero_num", "mass_flushed_num", "l1_lost", "l2sq_lost", "cosine", "push_down", "lost_bias")


def gradients():
    """Four tensors like activation gradients: log-normal magnitudes over many binades, zeros, a NaN, an inf;
    float32, float64 and float16."""
    rng = np.random.default_rng(RNG_SEED)
    a = (rng.standard_normal(5000) * np.exp(rng.normal(-12, 4, 5000))).astype(np.float32)
    a[:50] = 0
    a[60] = np.nan
    a[61] = -np.inf
    b = (rng.standard_normal((40, 30)) * 1e-6).astype(np.float32)
    c = (rng.standard_normal(3000) * np.exp(rng.normal(-20, 6, 3000))).astype(np.float64)
    d = (rng.standard_normal((7, 11, 3)) * 1e-4).astype(np.float16)
    return {"a": a, "b": b, "c": c, "d": d}


def labelled(report, names):
    """The CLI labels a tensor of an .npz 'file.npz:name'; the counters are named by the caller."""
    for t, n in zip(report["tensors"], names):
        assert t["tensor"].endswith(":" + n)
        t["tensor"] = n
    return report


@pytest.mark.parametrize("fmt,scale", [("fp16", 1.0), ("fp16", 1024.0), ("bf16", 1.0), ("fp8_e4m3", 0.5)])
def test_hist_json_same_as_cli(cli, fmt, scale):
    data = gradients()
    want = labelled(cli.report("hist", data, "--format", fmt, "--scale", scale), data)
    counters = {}
    for name, x in data.items():
        counters[name] = mpsim.UnderflowCounter(fmt)
        counters[name].add(x)
    got = json.loads(mpsim.hist_report_json(counters, int(np.log2(scale))))
    assert got == want
    one = json.loads(counters["b"].hist_json("b", int(np.log2(scale))))
    assert one["tensors"][0] == want["tensors"][1]
    for name, x in data.items():
        h = mpsim.Histogram()
        h.add(x)
        entry = next(t for t in want["tensors"] if t["tensor"] == name)
        assert json.loads(h.to_json()) == entry["histogram"]
    print(f"hist {fmt} scale {scale}: {sum(x.size for x in data.values())} values in {len(data)} tensors, the "
          f"JSON equal to `mpsim hist --json` field for field (tensor labels apart)")


@pytest.mark.parametrize("fmt,mode,scale,sweep", [("fp16", "rne", 1.0, True), ("fp16", "rtz", 65536.0, False),
                                                  ("bf16", "rne", 1.0, False), ("fp8_e5m2", "ru", 2.0**-4, True)])
def test_underflow_json_same_as_cli(cli, fmt, mode, scale, sweep):
    data = gradients()
    opts = ["--format", fmt, "--mode", mode, "--scale", scale] + (["--sweep"] if sweep else [])
    want = labelled(cli.report("underflow", data, *opts), data)
    counters = {}
    k = int(np.log2(scale))
    # The gradient mass lost needs every value rounded at the scale, which an UnderflowCounter does not keep: a
    # MassLostCounter per tensor gives its fields, and their merge in the command line's order its total
    # (test_mass_lost.py checks those fields against numpy).
    masses, mass_total = {}, mpsim.MassLostCounter(fmt, k, mode)
    for name, x in data.items():
        counters[name] = mpsim.UnderflowCounter(fmt, mode)
        counters[name].add(x)
        masses[name] = mpsim.MassLostCounter(fmt, k, mode)
        masses[name].add(x)
        mass_total.merge(masses[name])
    got = json.loads(mpsim.underflow_report_json(counters, k, sweep=sweep))
    for entry, name in zip(got["tensors"], data):
        entry.update(masses[name].stats())
    got["total"].update(mass_total.stats())
    assert all(key in got["total"] and key in want["total"] for key in MASS_LOST_KEYS)
    assert got == want
    one = json.loads(counters["a"].report_json("a", k, sweep=sweep))
    # One counter's own report: the counts' fields (the mass lost is the MassLostCounter's, compared above).
    assert one["tensors"][0] == {k: v for k, v in want["tensors"][0].items() if k not in MASS_LOST_KEYS}
    for name, entry in zip(data, want["tensors"]):
        assert counters[name].shape == entry["shape"] and counters[name].dtype == entry["dtype"]
        assert counters[name].moments() == {k: entry[k] for k in ["min", "max", "mean", "std", "l1_norm", "l2_norm"]}
    u = counters["a"].underflow(k)
    for key in ["underflows%", "underflows_num", "subnormals%", "overflows%", "numel", "cur_amax"]:
        assert u[key] == want["tensors"][0][key]
    assert counters["a"].recommend_scale(log2_scale=k) == want["tensors"][0]["recommended"]
    if sweep:
        assert counters["a"].sweep() == want["tensors"][0]["sweep"]
    print(f"underflow {fmt} {mode} scale {scale} sweep {sweep}: {sum(x.size for x in data.values())} values in "
          f"{len(data)} tensors, the JSON equal to `mpsim underflow --json` field for field (moments, mass lost, shape "
          f"and dtype included; tensor labels apart)")


def test_merge_add_pickle_counts():
    data = gradients()
    whole_c, whole_h = mpsim.UnderflowCounter("fp16"), mpsim.Histogram()
    parts_c, parts_h = [], []
    for x in data.values():
        whole_c.add(x)
        whole_h.add(x)
        c, h = mpsim.UnderflowCounter("fp16"), mpsim.Histogram()
        c.add(x)
        h.add(x)
        parts_c.append(c)
        parts_h.append(h)
    assert functools.reduce(operator.add, parts_c) == whole_c
    assert functools.reduce(operator.add, parts_h) == whole_h
    m = mpsim.UnderflowCounter("fp16")
    for c in parts_c:
        m.merge(c)
    assert m == whole_c and m.total == sum(x.size for x in data.values())
    assert pickle.loads(pickle.dumps(whole_c)) == whole_c
    assert pickle.loads(pickle.dumps(whole_h)) == whole_h
    # The all-reduce recipe: sum the int64 counts (the moments' exact words included), max the amax and max,
    # min the amin_nonzero and min.
    summed = sum(c.counts_array() for c in parts_c)
    assert summed.dtype == np.int64
    rebuilt = mpsim.UnderflowCounter.from_counts_array("fp16", "rne", summed, max(c.amax for c in parts_c),
                                                       min(c.amin_nonzero for c in parts_c),
                                                       min=min(c.moments()["min"] for c in parts_c),
                                                       max=max(c.moments()["max"] for c in parts_c))
    # The shape and dtype belong to one array added: a counter made from counts has none, nor has whole_c.
    assert whole_c.shape is None and rebuilt.shape is None
    assert rebuilt.moments() == whole_c.moments() and rebuilt.has_moments
    assert rebuilt.report_json("t", sweep=True) == whole_c.report_json("t", sweep=True)
    # Without min / max the other moments are still exact, min and max unknown (null).
    partial = mpsim.UnderflowCounter.from_counts_array("fp16", "rne", summed, whole_c.amax, whole_c.amin_nonzero)
    assert {k: v for k, v in partial.moments().items() if k not in ("min", "max")} == \
        {k: v for k, v in whole_c.moments().items() if k not in ("min", "max")}
    assert partial.moments()["min"] is None
    # moments=False: the range counts alone (a shorter counts array); merged with one that has moments, none.
    bare = mpsim.UnderflowCounter("fp16", moments=False)
    for x in data.values():
        bare.add(x)
    assert not bare.has_moments and bare.moments() is None
    assert len(bare.counts_array()) < len(whole_c.counts_array())
    assert np.array_equal(bare.counts_array(), whole_c.counts_array()[:len(bare.counts_array())])
    assert json.loads(bare.report_json("t"))["total"].keys() < json.loads(whole_c.report_json("t"))["total"].keys()
    assert (bare + whole_c).moments() is None
    assert pickle.loads(pickle.dumps(bare)) == bare
    one = mpsim.UnderflowCounter("fp16")
    one.add(data["b"])
    back = pickle.loads(pickle.dumps(one))
    assert back == one and (back.shape, back.dtype) == ([40, 30], "float32")
    assert mpsim.UnderflowCounter.from_json(one.to_json()).report_json("b") == one.report_json("b")
    hsum = sum(h.counts_array() for h in parts_h)
    assert mpsim.Histogram.from_counts_array(hsum) == whole_h
    assert mpsim.Histogram.from_json(whole_h.to_json()) == whole_h
    assert mpsim.UnderflowCounter.from_json(whole_c.to_json()) == whole_c
    sat = mpsim.UnderflowCounter(mpsim.Format("fp8_e4m3").with_options(overflow="saturate"), "rtz")
    sat.add(data["a"])
    back = mpsim.UnderflowCounter.from_json(sat.to_json())
    assert back == sat and back.report_json("a", sweep=True) == sat.report_json("a", sweep=True)
    assert whole_c.histogram() == whole_h
    print(f"{len(parts_c)} counters / histograms merged by merge(), +, counts sums: equal to one fed everything "
          f"({whole_c.total} values); pickles and JSON round trip")


def test_analysis_bad_input():
    c = mpsim.UnderflowCounter("fp16")
    with pytest.raises(ValueError):
        c.merge(mpsim.UnderflowCounter("bf16"))
    with pytest.raises(ValueError):
        mpsim.UnderflowCounter("fp16", "sr")
    with pytest.raises(TypeError):
        c.add(np.ones(3, np.int16))
    # A strided view is counted as its contiguous copy.
    v = np.arange(64, dtype=np.float32).reshape(8, 8)[:, ::3]
    h1, h2 = mpsim.Histogram(), mpsim.Histogram()
    h1.add(v)
    h2.add(np.ascontiguousarray(v))
    assert h1 == h2 and h1.total == v.size
    c1, c2 = mpsim.UnderflowCounter("fp16"), mpsim.UnderflowCounter("fp16")
    c1.add(v)
    c2.add(np.ascontiguousarray(v))
    assert c1 == c2 and (c1.shape, c1.dtype) == ([8, 3], "float32")
    c3 = mpsim.UnderflowCounter("fp16")
    c3.add([1.0, 2.0, 3.0])  # a list: numpy's float64 array of it
    assert (c3.shape, c3.dtype, c3.moments()["mean"]) == ([3], "float64", 2.0)
    with pytest.raises(ValueError):
        mpsim.UnderflowCounter.from_counts_array("fp16", "rne", np.zeros(5, np.int64))
    with pytest.raises(ValueError):
        mpsim.Histogram.from_counts_array(-np.ones(2102, np.int64))
    with pytest.raises(ValueError):
        mpsim.Histogram.from_json("{")
    with pytest.raises(ValueError):
        mpsim.UnderflowCounter.from_json('{"schema": "mpsim-hist-1"}')
    with pytest.raises(ValueError):
        mpsim.hist_report_json({}, 0)


# Formats of every kind: IEEE with inf (fp16, e5m2), float's exponent (bf16, tf32), fp8 without inf (e4m3fn, the
# fnuz types), ml_dtypes' narrow types under their ml_dtypes names (saturating fp6 / fp4, e3m4).
MANY_FORMATS = ["fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                "float8_e3m4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


def edge_values(formats):
    """Zeros, float32 subnormals, inf and NaN, and every rounding edge of each format (half its smallest
    subnormal, the smallest subnormal, the subnormal/normal boundary, the largest finite value and what
    rounds to overflow) at the scales 2^-8 .. 2^8, each with its float32 neighbours, both signs."""
    f32 = np.float32
    out = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, -3e-40]
    for name in formats:
        f = mpsim.Format(name)
        ulp_max = 2.0 ** (math.floor(math.log2(f.max_finite)) - f.man_bits)
        for p in (f.min_subnormal / 2, f.min_subnormal, f.min_subnormal * 1.5, f.min_normal - f.min_subnormal / 2,
                  f.min_normal, f.max_finite, f.max_finite + ulp_max / 2, f.max_finite + ulp_max):
            for k in range(-8, 9):
                x = f32(math.ldexp(p, k))
                if np.isfinite(x) and x != 0:
                    out += [x, np.nextafter(x, f32(0)), np.nextafter(x, f32(np.inf))]
    v = np.array(out, dtype=np.float32)
    return np.concatenate([v, -v])


def test_add_many_equals_separate_counters():
    rng = np.random.default_rng(7)
    mags = np.exp2(rng.uniform(-150, 128, 20000)).astype(np.float32)
    random = np.where(rng.random(20000) < 0.5, -mags, mags).astype(np.float32)
    bits = rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # any float32
    checked = values = 0
    for i, a in enumerate(MANY_FORMATS):
        for b in MANY_FORMATS[i:]:
            edges = edge_values([a, b])
            for mode in ("rne", "rtz", "ru"):
                one_pass = [mpsim.UnderflowCounter(a, mode, moments=False), mpsim.UnderflowCounter(b, mode, moments=False)]
                alone = [mpsim.UnderflowCounter(a, mode, moments=False), mpsim.UnderflowCounter(b, mode, moments=False)]
                for x in (random, bits, edges, random[:100]):
                    mpsim.UnderflowCounter.add_many(one_pass, x)
                    for c in alone:
                        c.add(x)
                    values += x.size
                for c, d in zip(one_pass, alone):
                    assert np.array_equal(c.counts_array(), d.counts_array()), (a, b, mode)
                    assert (c.amax, c.amin_nonzero) == (d.amax, d.amin_nonzero) and c == d
                    checked += 1
    # Every format at once (more than one threshold union holds), float64 input, moments kept where asked.
    together = [mpsim.UnderflowCounter(f, "rna", moments=(f == "fp16")) for f in MANY_FORMATS]
    alone = [mpsim.UnderflowCounter(f, "rna", moments=(f == "fp16")) for f in MANY_FORMATS]
    for x in (random, edge_values(MANY_FORMATS), random.astype(np.float64)):
        mpsim.UnderflowCounter.add_many(together, x)
        for c in alone:
            c.add(x)
    assert together == alone and together[0].moments() == alone[0].moments()
    # range_counts(k): underflow(k)'s counts without its dict.
    for c in together[:4]:
        for k in range(-20, 21, 4):
            st = c.underflow(k)
            assert c.range_counts(k) == (st["nonzero_finite_num"], st["underflows_num"], st["subnormals_num"],
                                         st["overflows_num"])
    assert together[0].total == random.size * 2 + edge_values(MANY_FORMATS).size
    with pytest.raises(TypeError):
        mpsim.UnderflowCounter.add_many([together[0], None], random)
    with pytest.raises(TypeError):
        mpsim.UnderflowCounter.add_many(together, random.astype(np.int32))
    print(f"add_many vs add: {checked} counters of {len(MANY_FORMATS)} formats in pairs (rne, rtz, ru), "
          f"{values} values added in all, counts arrays equal; all {len(MANY_FORMATS)} at once in rna with float64 input")


def test_best_window_equals_the_sweeps_on_random_counts():
    """UnderflowCounter.best_window (the library's search, which mpsim.torch's monitor calls) against
    sweep()['best_window'] (every scale): random count vectors in random stretches of the layout, through
    from_counts_array, every deterministic mode, several formats and ranges."""
    rng = np.random.default_rng(33)
    formats = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "float6_e2m3fn", "float4_e2m1fn"]
    modes = ["rne", "rtz", "ru", "rd", "rna", "rto"]
    ranges = [(-128, 128), (-8, 32), (-20, -10), (30, 60), (7, 7)]
    compared = found = 0
    differ = []
    for trial in range(24):
        fmt, mode = formats[trial % len(formats)], modes[trial % len(modes)]
        size = len(mpsim.UnderflowCounter(fmt, mode, moments=False).counts_array())
        counts = np.zeros(size, dtype=np.int64)
        start = int(rng.integers(size))
        span = size if trial % 4 == 0 else int(rng.integers(1, 64))
        cells = (start + rng.integers(0, span, int(rng.integers(1, 40)))) % size
        np.add.at(counts, cells, rng.integers(1, 1000, len(cells)))
        c = mpsim.UnderflowCounter.from_counts_array(fmt, mode, counts, 1.0, 1.0)
        for lo, hi in ranges:
            w = c.sweep(lo, hi)["best_window"]
            want = None if w is None else (w["lo_log2_scale"], w["hi_log2_scale"])
            got = c.best_window(lo, hi)
            compared += 1
            found += got is not None
            if got != want:
                differ.append(f"{fmt} {mode} trial {trial} {lo}..{hi}: sweep {want}, search {got}")
    print(f"best_window: {compared} (count vector, format, mode, range) cases, {found} with a window; "
          f"{len(differ)} differ from the sweep's")
    assert not differ, differ[:5]
    assert 0 < found < compared
    with pytest.raises(ValueError, match="lo must not exceed hi"):
        c.best_window(3, 2)


def test_stats_dicts_built_directly_equal_the_json_paths():
    """UnderflowCounter.underflow(k) and MassLostCounter.stats() build their dicts in C++ without JSON
    (python/src/analysis.cpp underflow_dict, mass.cpp mass_stats_dict): the same keys in the same order, the same
    values and types as the JSON the command line writes (report_json) and as mass_lost_report's JSON path, on
    tensors with every edge (zeros, NaN, inf, subnormals, everything flushed, overflow, nothing at all);
    recommended_log2_scale(margin) is recommend_scale(margin)'s log2_scale."""
    data = dict(gradients())
    data["empty"] = np.zeros(0, np.float32)
    data["zeros and nan"] = np.array([0.0, -0.0, np.nan], np.float32)
    data["all flushed"] = np.full(9, 2.0**-30, np.float32)
    data["overflow"] = np.array([1.0, 7e4, -1e5, 2.0**-20, np.inf], np.float32)
    data["float subnormals"] = np.array([2.0**-140, -(2.0**-149), 1e-3], np.float32)
    compared, nones = 0, 0
    for fmt in ("fp16", "bf16", "fp8_e4m3", "float4_e2m1fn"):
        for name, x in data.items():
            c = mpsim.UnderflowCounter(fmt, moments=False)
            c.add(x)
            for k in (0, 12, -30):
                got = c.underflow(k)
                report = json.loads(c.report_json(log2_scale=k))["tensors"][0]
                want = {key: report[key] for key in sorted(report) if key in got}
                assert list(got) == list(want), (fmt, name, k)  # every key, in the JSON's (sorted) order
                assert [(v, type(v)) for v in got.values()] == [(v, type(v)) for v in want.values()], (fmt, name, k)
                left = set(report) - set(got) - {"tensor", "format", "rounding", "scale", "log2_scale", "recommended",
                                                  "shape", "dtype"}
                assert not left, left  # no field of the command line's underflow statistics is missing
                compared += 1
            for margin in (1.0, 2.0, 3.5):  # the monitor's shortcut to the report's recommended scale
                rec = c.recommend_scale(margin=margin)
                assert c.recommended_log2_scale(margin) == (None if rec is None else rec["log2_scale"])
                compared += 1
            m = mpsim.MassLostCounter(fmt, 4)
            m.add(x)
            got = m.stats()
            want = mpsim._core.mass_lost_report(json.dumps(json.loads(m.to_json())["sums"]))
            assert list(got.items()) == list(want.items()), (fmt, name)
            assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
            nones += sum(v is None for v in got.values())
            compared += 1
    print(f"{compared} dicts built directly and recommended scales equal their JSON path's, keys, order and types "
          f"({nones} None values among the mass lost's)")
    assert nones > 0


def test_clear_leaves_counters_as_new_ones():
    # UnderflowCounter.clear and MassLostCounter.clear (what the torch monitor reuses between sampled steps): after
    # clear() and new values, the counts, moments, shape, dtype, stats and sums of a new counter given those only.
    data = list(gradients().values())
    checked = 0
    for fmt in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        for moments in (True, False):
            reused, fresh = mpsim.UnderflowCounter(fmt, moments=moments), mpsim.UnderflowCounter(fmt, moments=moments)
            reused.add(data[0])
            reused.add(data[1].astype(np.float64))
            reused.clear()
            assert reused.total == 0 and reused.amax == 0 and reused.shape is None
            reused.add(data[2])
            fresh.add(data[2])
            assert reused == fresh and reused.counts_array().tolist() == fresh.counts_array().tolist()
            assert (reused.shape, reused.dtype, reused.moments()) == (fresh.shape, fresh.dtype, fresh.moments())
            assert reused.underflow(3) == fresh.underflow(3)
            checked += 1
        m_reused, m_fresh = mpsim.MassLostCounter(fmt), mpsim.MassLostCounter(fmt)
        m_reused.add(data[0])
        m_reused.clear()
        assert m_reused.sums()["nonzero"] == 0
        m_reused.add(data[2])
        m_fresh.add(data[2])
        assert m_reused == m_fresh and m_reused.stats() == m_fresh.stats() and m_reused.sums() == m_fresh.sums()
        checked += 1
    print(f"clear(): {checked} counters cleared and refilled with {data[2].size} values equal new ones (counts, "
          f"moments, shape, stats, sums)")
