"""mpsim.round / encode / decode against numpy's and ml_dtypes' casts (where those are exact) and against the
`mpsim round` command line on the same input, bit for bit; options, shapes, in-place output and bad input."""
import subprocess

import numpy as np
import pytest

import ml_dtypes
import ml_dtypes_check as mlc  # tests/format/ml_dtypes_check.py (conftest puts it on sys.path)
import mpsim

RNG_SEED = 20261125


def edge_cases_f32():
    """±0, float32 subnormals, fp16 / bf16 subnormals and ties, max finite and the overflow boundaries, inf, NaNs."""
    vals = [0.0, -0.0, 1.0, -1.0, 2.0**-149, -(2.0**-149), 2.0**-126, 2.0**-24, 2.0**-25, 3 * 2.0**-26,
            2.0**-14, 2.0**-14 - 2.0**-24, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
            65504.0, 65519.0, 65520.0, -65520.0, 65536.0, 448.0, 464.0, 57344.0, 61440.0, 3.0e38,
            float(np.finfo(np.float32).max), np.inf, -np.inf]
    x = np.array(vals, dtype=np.float32)
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000, 0x7F802000],
                        dtype=np.uint32).view(np.float32)
    return np.concatenate([x, nan_bits])


def sample_f32(n=1 << 16):
    rng = np.random.default_rng(RNG_SEED)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    logu = np.exp(rng.uniform(np.log(2.0**-30), np.log(2.0**20), n)).astype(np.float32)
    return np.concatenate([edge_cases_f32(), bits, logu, -logu])


def same_bits_or_both_nan(got_bits, want_bits, got_vals, want_vals):
    """Mismatches: encodings differ, unless both are NaN of the same sign (NaN payloads: docs/formats.md)."""
    diff = got_bits != want_bits
    nan_ok = np.isnan(got_vals) & np.isnan(want_vals) & (np.signbit(got_vals) == np.signbit(want_vals))
    return diff & ~nan_ok


def test_fp16_rne_matches_numpy():
    x = sample_f32()
    got = mpsim.encode(x, "fp16")
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    bad = same_bits_or_both_nan(got, want.view(np.uint16), got.view(np.float16), want)
    vals = mpsim.round(x, "fp16")
    bad_vals = ~((vals == want.astype(np.float32)) | (np.isnan(vals) & np.isnan(want)))
    print(f"fp16 rne vs numpy astype(float16): {x.size} inputs, {int(bad.sum())} encoding mismatches, "
          f"{int(bad_vals.sum())} value mismatches")
    assert bad.sum() == 0 and bad_vals.sum() == 0
    assert np.array_equal(np.signbit(vals), np.signbit(want.astype(np.float32)))


@pytest.mark.parametrize("name", mlc.TYPES)
def test_ml_dtypes_types_match(name):
    """Every ml_dtypes element type mpsim names: the structured inputs of ml_dtypes_check (every value,
    every midpoint and its neighbours, log-uniform and random bits, specials), known differences apart."""
    t = getattr(ml_dtypes, name)
    x, _, _ = mlc.structured_inputs(t, np.random.default_rng(RNG_SEED))
    x = np.concatenate([x, edge_cases_f32()])
    got = mpsim.encode(x, name)
    bad, known, payload, first, _ = mlc.compare(name, x, got, t)
    print(f"{name}: {x.size} inputs through mpsim.encode vs ml_dtypes, {bad} mismatches, {known} known "
          f"differences, {payload} NaN payload differences; first bad at {list(first)}")
    assert bad == 0


FORMATS = ["fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "float6_e2m3fn", "float4_e2m1fn", "float8_e8m0fnu",
           "e6m9"]
MODES = ["rne", "rtz", "ru", "rd", "rna", "rto", "sr"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_as_cli_every_mode(cli, fmt):
    """Values, encodings and the Stats of the same pass, as `mpsim round` (float32 input)."""
    x = sample_f32(1 << 12)
    checked = 0
    for mode in MODES:
        opts = ["--to", fmt, "--mode", mode]
        kw = {}
        if mode == "sr":
            opts += ["--seed", "7", "--sr-bits", "8"]
            kw = {"seed": 7, "sr_bits": 8}
        want_vals, want_stats = cli.round(x, *opts, stats=True)
        got_vals, got_stats = mpsim.round(x, fmt, mode, stats=True, **kw)
        assert got_vals.dtype == want_vals.dtype and got_vals.shape == want_vals.shape
        assert np.array_equal(got_vals.view(np.uint32), want_vals.view(np.uint32)), (fmt, mode)
        for k, v in got_stats.items():
            assert want_stats[k] == v, (fmt, mode, k)
        if fmt != "e6m9":  # 16 bits: --bits writes uint16 as encode does
            want_bits, _ = cli.round(x, *opts, "--bits")
            got_bits = mpsim.encode(x, fmt, mode, **kw)
            assert got_bits.dtype == want_bits.dtype and np.array_equal(got_bits, want_bits), (fmt, mode)
        checked += x.size
    print(f"{fmt}: {checked} float32 inputs over modes {MODES} through mpsim.round/encode and `mpsim round`: "
          "0 mismatches")


@pytest.mark.parametrize("opts,kw", [
    (["--subnormals", "flush"], {"subnormals": "flush"}),
    (["--overflow", "saturate"], {"overflow": "saturate"}),
    (["--like", "x86"], {"like": "x86"}),
    (["--like", "cuda-sm90"], {"like": "cuda-sm90"}),
    (["--daz"], {"daz": True}),
])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_options_same_as_cli(cli, fmt, opts, kw):
    x = sample_f32(1 << 12)
    want_vals, want_stats = cli.round(x, "--to", fmt, *opts, stats=True)
    got_vals, got_stats = mpsim.round(x, fmt, stats=True, **kw)
    assert np.array_equal(got_vals.view(np.uint32), want_vals.view(np.uint32))
    assert all(want_stats[k] == v for k, v in got_stats.items())
    want_bits, _ = cli.round(x, "--to", fmt, "--bits", *opts)
    assert np.array_equal(mpsim.encode(x, fmt, **kw), want_bits)
    # In place (out=x): a device profile rereads NaN inputs' payloads, which the output overwrites.
    y = x.copy()
    mpsim.round(y, fmt, out=y, **kw)
    assert np.array_equal(y.view(np.uint32), want_vals.view(np.uint32))
    print(f"{fmt} {kw}: {x.size} inputs, values (also in place), encodings and stats as `mpsim round`")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "fp8_e5m2", "e11m30"])
def test_float64_same_as_cli(cli, fmt):
    rng = np.random.default_rng(RNG_SEED)
    with np.errstate(invalid="ignore"):  # signalling NaNs widened to float64
        edges = edge_cases_f32().astype(np.float64)
    x = np.concatenate([rng.integers(0, 1 << 63, 1 << 12, dtype=np.uint64).view(np.float64),
                        np.exp(rng.uniform(-40, 40, 1 << 12)), edges])
    for mode in ["rne", "rto", "sr"]:
        want, _ = cli.round(x, "--to", fmt, "--mode", mode)
        got = mpsim.round(x, fmt, mode)
        assert got.dtype == np.float64 and np.array_equal(got.view(np.uint64), want.view(np.uint64)), (fmt, mode)
        if fmt != "e11m30":
            want_bits, want_stats = cli.round(x, "--to", fmt, "--mode", mode, "--bits", stats=True)
            got_bits, got_stats = mpsim.encode(x, fmt, mode, stats=True)
            assert got_bits.dtype == want_bits.dtype and np.array_equal(got_bits, want_bits), (fmt, mode)
            assert all(want_stats[k] == v for k, v in got_stats.items()), (fmt, mode)
    print(f"{fmt}: {x.size} float64 inputs x 3 modes as `mpsim round`")


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1", "nvfp4"])
def test_block_formats_same_as_cli(cli, name):
    rng = np.random.default_rng(RNG_SEED)
    x = (rng.standard_normal((8, 100)) * np.exp(rng.uniform(-20, 20, (8, 1)))).astype(np.float32)
    x[3, 5] = np.nan
    for mode, kw, extra in [("rne", {}, []), ("sr", {"seed": 3}, ["--seed", "3"])]:
        want, want_stats = cli.round(x, "--to", name, "--mode", mode, *extra, stats=True)
        got, got_stats = mpsim.round(x, name, mode, stats=True, **kw)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, mode)
        for k in ["count", "nonzero", "nan", "inf_in", "flushed", "subnormal", "saturated", "blocks", "nan_blocks"]:
            assert got_stats[k] == want_stats[k], (name, mode, k)
        # nvfp4 with a NaN in the tensor: a NaN tensor scale, which the CLI's JSON writes as null.
        ts = got_stats["tensor_scale"]
        assert (want_stats["tensor_scale"] is None) if np.isnan(ts) else ts == want_stats["tensor_scale"]
        assert [list(p) for p in got_stats["scale_log2"]] == want_stats["scale_log2"]
        want_npz, _ = cli.round(x, "--to", name, "--mode", mode, *extra, "--bits")
        enc = mpsim.encode(x, name, mode, **kw)
        assert np.array_equal(enc[0], want_npz["elements"]) and np.array_equal(enc[1], want_npz["scales"])
        if name == "nvfp4":
            assert np.float32(enc[2]).view(np.uint32) == want_npz["tensor_scale"].view(np.uint32)[0]
        back = mpsim.decode_blocks(*enc[:2], name, *(enc[2:] if name == "nvfp4" else ()))
        assert np.array_equal(back.view(np.uint32), want.view(np.uint32))
    print(f"{name}: {x.size} values x 2 modes, dequantized values, encodings and stats as `mpsim round`")


def test_decode_inverts_encode():
    x = sample_f32(1 << 12)
    with np.errstate(invalid="ignore"):  # signalling NaNs widened to float64
        x64 = x.astype(np.float64)
    for f in mpsim.formats():
        fmt = mpsim.Format(f)
        if fmt.storage_bits > 32:
            continue
        bits = mpsim.encode(x64, f)
        v64 = mpsim.decode(bits, f, np.float64)
        r64 = mpsim.round(x64, f)
        ok = (v64 == r64) | (np.isnan(v64) & np.isnan(r64))
        assert ok.all(), f
        if fmt.exp_bits <= 8:
            v32 = mpsim.decode(bits, f)
            assert v32.dtype == np.float32
            r32 = mpsim.round(x, f)
            assert (((v32 == r32) | (np.isnan(v32) & np.isnan(r32)))).all(), f
    # An ml_dtypes array is decoded from its encodings.
    with np.errstate(over="ignore", invalid="ignore"):
        e4 = x.astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(mpsim.decode(e4, "float8_e4m3fn"), e4.astype(np.float32), equal_nan=True)
    print(f"decode(encode(x)) == round(x) for {len(mpsim.formats())} formats, {x.size} inputs each")


def test_shapes_inplace_and_strided():
    x = sample_f32(1 << 10)[: 3 * 4 * 80].reshape(3, 4, 80)
    flat = mpsim.round(x.ravel(), "bf16")
    got = mpsim.round(x, "bf16")
    assert got.shape == x.shape and np.array_equal(got.ravel().view(np.uint32), flat.view(np.uint32))
    # A strided view is copied to a contiguous one first: same values as its contiguous copy.
    view = x[:, ::2, ::3]
    assert np.array_equal(mpsim.round(view, "fp16").view(np.uint32),
                          mpsim.round(np.ascontiguousarray(view), "fp16").view(np.uint32))
    y = x.copy()
    r = mpsim.round(y, "bf16", out=y)
    assert r is y and np.array_equal(y.view(np.uint32), got.view(np.uint32))
    assert mpsim.round(np.zeros((0, 5), np.float32), "fp16").shape == (0, 5)
    assert mpsim.round(np.float32(1 + 2.0**-11), "fp16") == np.float32(1.0)
    assert mpsim.encode(np.array(65520.0, np.float32), "fp16") == 0x7C00
    print("shapes (3-D, 0-d, empty), strided input, out= in place: as the flat contiguous call")


def test_bad_input_raises():
    x = np.ones(8, np.float32)
    cases = [
        (TypeError, lambda: mpsim.round(np.ones(8, np.int32), "fp16")),
        (TypeError, lambda: mpsim.round(np.ones(8, np.complex64), "fp16")),
        (ValueError, lambda: mpsim.round(np.ones(8, np.float16), "bf16")),
        (TypeError, lambda: mpsim.round(np.ones(8, np.float16), "mxfp8_e4m3")),
        (ValueError, lambda: mpsim.round(x, "fp17")),
        (ValueError, lambda: mpsim.round(x, "fp16", "nearest-sideways")),
        (ValueError, lambda: mpsim.round(x, "fp16", sr_bits=8)),
        (ValueError, lambda: mpsim.round(x, "fp16", "sr", sr_bits=40)),
        (ValueError, lambda: mpsim.round(x, "fp16", subnormals="drop")),
        (ValueError, lambda: mpsim.round(x, "fp16", overflow="wrap")),
        (ValueError, lambda: mpsim.round(x, "fp16", like="tpu")),
        (ValueError, lambda: mpsim.round(x, "fp16", out=np.ones(7, np.float32))),
        (ValueError, lambda: mpsim.round(x, "fp16", out=np.ones(16, np.float32)[::2])),
        (TypeError, lambda: mpsim.round(x, "fp16", out=np.ones(8, np.float64))),
        (ValueError, lambda: mpsim.round(x, "mxfp8_e4m3", overflow="saturate")),
        (ValueError, lambda: mpsim.encode(x, "fp64")),
        (TypeError, lambda: mpsim.decode(np.ones(8, np.uint8), "fp16")),
        (ValueError, lambda: mpsim.decode(np.ones(8, np.uint16), "e11m4")),
        (ValueError, lambda: mpsim.round(x, "fp64")),
    ]
    for i, (exc, call) in enumerate(cases):
        with pytest.raises(exc) as info:
            call()
        print(f"case {i}: {exc.__name__}: {info.value}")
        assert str(info.value)


def test_mode_names_as_the_cli(cli):
    """The module takes exactly the command line's mode names (one parser, parse_rounding_mode): each accepted
    name gives the CLI's bits, and a name the CLI rejects ("rz": the toward-zero mode is "rtz") is rejected by both
    with the same message."""
    x = (np.random.default_rng(3).standard_normal(256) * 1e3).astype(np.float32)
    for mode in ["rne", "rtz", "toward-zero", "roundTowardZero", "ru", "rd", "rna", "rto"]:
        want, _ = cli.round(x, "--to", "fp16", "--mode", mode)
        assert np.array_equal(mpsim.round(x, "fp16", mode).view(np.uint32), want.view(np.uint32)), mode
    src = cli.path("in.npy")
    np.save(src, x)
    r = subprocess.run([cli.binary, "round", "--to", "fp16", "--mode", "rz", src, cli.path("out.npy")],
                       capture_output=True, text=True)
    with pytest.raises(ValueError) as info:
        mpsim.round(x, "fp16", "rz")
    print(f"mode 'rz': the CLI exits {r.returncode} ({r.stderr.strip()}); the module: ValueError({info.value})")
    assert r.returncode == 2 and str(info.value) in r.stderr


def test_format_objects():
    want = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
            "fp8_e5m2": ml_dtypes.float8_e5m2, "float6_e2m3fn": ml_dtypes.float6_e2m3fn}
    for name, t in want.items():
        f = mpsim.Format(name)
        fi = ml_dtypes.finfo(t)
        assert (f.max_finite, f.min_normal, f.min_subnormal) == (float(fi.max), float(fi.smallest_normal),
                                                                  float(fi.smallest_subnormal)), name
        assert f.man_bits == fi.nmant and f.exp_bits == fi.nexp, name
    assert mpsim.Format("float8_e4m3fn") == mpsim.Format("fp8_e4m3")
    import pickle
    f = mpsim.Format("bf16").with_options(subnormals="flush")
    assert pickle.loads(pickle.dumps(f)) == f and f != mpsim.Format("bf16")
    assert all(mpsim.Format(n).name == n for n in mpsim.formats())
    assert "nvfp4" in mpsim.block_formats()
    print(f"Format constants of {len(want)} formats equal ml_dtypes.finfo; {len(mpsim.formats())} names parse")


@pytest.mark.parametrize("fmt", ["fp16", "fp8_e4m3", "fp8_e5m2", "float6_e3m2fn"])
def test_float16_input_same_as_cli(cli, fmt):
    """float16 arrays: rounded as their float32 values, stored back as float16 (`mpsim round` on a float16 file)."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)  # every float16
    for mode, kw, extra in [("rne", {}, []), ("rd", {}, []), ("sr", {"seed": 9}, ["--seed", "9"])]:
        want, want_stats = cli.round(x, "--to", fmt, "--mode", mode, *extra, stats=True)
        got, got_stats = mpsim.round(x, fmt, mode, stats=True, **kw)
        assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.view(np.uint16)), (fmt, mode)
        assert all(want_stats[k] == v for k, v in got_stats.items())
        assert np.array_equal(mpsim.encode(x, fmt, mode, **kw), cli.round(x, "--to", fmt, "--mode", mode, *extra,
                                                                          "--bits")[0])
    # ml_dtypes bfloat16 arrays: the same values as rounding their float32 widening, stored as bfloat16.
    with np.errstate(invalid="ignore"):  # float16 signalling NaNs
        b = x.astype(np.float32).astype(ml_dtypes.bfloat16)
    if fmt != "fp16":
        got = mpsim.round(b, fmt)
        assert got.dtype == b.dtype
        want = mpsim.encode(mpsim.round(b.astype(np.float32), fmt), "bf16")
        assert np.array_equal(got.view(np.uint16), want)
    print(f"{fmt}: all {x.size} float16 values x 3 modes as `mpsim round` on a float16 .npy")


def test_threads_calling_at_once():
    """The calls release the GIL, so Python threads run them at the same time: each must still get the bits of a
    call made alone (stochastic rounding included: element i's random number depends only on seed and i)."""
    import threading
    rng = np.random.default_rng(RNG_SEED)
    xs = [np.exp(rng.uniform(-30, 15, 1 << 18)).astype(np.float32) for _ in range(4)]
    alone = [mpsim.encode(x, "fp8_e5m2", "sr", seed=i) for i, x in enumerate(xs)]
    results = [None] * len(xs)

    def work(i):
        for _ in range(3):
            results[i] = mpsim.encode(xs[i], "fp8_e5m2", "sr", seed=i)
            c = mpsim.UnderflowCounter("fp16")
            c.add(xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, a) for r, a in zip(results, alone))
    print(f"{len(xs)} threads x 3 calls of {xs[0].size} values: the bits of the calls made alone")


@pytest.mark.parametrize("fmt,man_bits", [("fp16", 10), ("bf16", 7), ("fp8_e4m3", 3)])
def test_flip_same_as_cli(cli, fmt, man_bits):
    """Soft errors (flip=, flip_seed=): values, encodings and the flipped count as `mpsim round --flip`;
    the same with threads 1 and 2; flip=0 is plain rounding; flip=1 flips exactly one fraction bit of
    every element (the draws themselves are checked against Random123 in tests/format/soft_error_test.cpp)."""
    x = np.concatenate([sample_f32(1 << 16), sample_f32(1 << 16)[::-1]])  # > 2 * 2^16: two threads run
    opts = ["--to", fmt, "--flip", "0.05", "--flip-seed", "11"]
    want_vals, want_stats = cli.round(x, *opts, stats=True)
    got_vals, got_stats = mpsim.round(x, fmt, flip=0.05, flip_seed=11, stats=True, threads=1)
    assert np.array_equal(got_vals.view(np.uint32), want_vals.view(np.uint32))
    assert got_stats["flipped"] == want_stats["flipped"] > 0
    two = mpsim.round(x, fmt, flip=0.05, flip_seed=11, threads=2)
    assert np.array_equal(two.view(np.uint32), got_vals.view(np.uint32))
    want_bits, _ = cli.round(x, *opts, "--bits")
    got_bits, bits_stats = mpsim.encode(x, fmt, flip=0.05, flip_seed=11, stats=True)
    assert np.array_equal(got_bits, want_bits) and bits_stats["flipped"] == want_stats["flipped"]
    plain = mpsim.encode(x, fmt)
    assert np.array_equal(mpsim.encode(x, fmt, flip=0.0, flip_seed=11), plain)
    diff = (mpsim.encode(x, fmt, flip=1.0) ^ plain).astype(np.uint64)
    assert np.all(diff != 0) and np.all((diff & (diff - np.uint64(1))) == 0)  # one bit each
    assert np.all(diff < np.uint64(1 << man_bits))  # in the fraction field
    want_any, _ = cli.round(x, *opts, "--flip-bits", "any", "--bits")
    assert np.array_equal(mpsim.encode(x, fmt, flip=0.05, flip_seed=11, flip_bits="any"), want_any)
    assert not np.array_equal(want_any, want_bits)
    print(f"{fmt}: {x.size} inputs, flip=0.05: {got_stats['flipped']} flipped, values / encodings / count as the "
          f"CLI, threads 1 = 2; flip=0 plain; flip=1 one fraction bit in all {x.size}")


def test_flip_bad_probability_raises():
    x = np.ones(8, np.float32)
    for p in (-0.1, 1.5, float("nan")):
        for call in (mpsim.round, mpsim.encode):
            with pytest.raises(ValueError, match="flip="):
                call(x, "fp16", flip=p)
    with pytest.raises(TypeError):
        mpsim.round(x, "fp16", flip="abc")
    with pytest.raises(ValueError, match="flip_bits='sign'"):
        mpsim.encode(x, "fp16", flip=0.5, flip_bits="sign")
    with pytest.raises(ValueError, match="flip"):
        mpsim.round(x, "mxfp8_e4m3", flip=0.1)
    print("flip outside [0, 1], NaN, text and with a block format: refused, naming flip")


def test_option_errors_name_the_keyword():
    """An error about one option (mpsim::FieldError, lib/mpsim/field_error.hpp) names the keyword as Python
    spells it, block_scale='...', where the command line says --block-scale."""
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    cases = [(dict(fmt="mxfp8_e4m3", block_scale="sideways"), "block_scale='sideways': unknown rule (known: floor, rceil)"),
             (dict(fmt="nvfp4", block_scale="rceil"), "block_scale='rceil': applies to the MX formats"),
             (dict(fmt="mxfp8_e4m3", block=-3), "block=-3: must be positive")]
    for kw, want in cases:
        with pytest.raises(ValueError) as e:
            mpsim.round(x, **kw)
        print(f"mpsim.round(x, {kw}): {e.value}")
        assert str(e.value).startswith(want), str(e.value)
        assert "--" not in str(e.value)


def test_block_format_name_where_an_element_format_is_needed():
    """The library says a block format is not an element format (mpsim::BlockFormatNameError); Python adds where
    it takes one, in its own words, where the command line names `mpsim round --to`."""
    with pytest.raises(ValueError) as e:
        mpsim.Format("mxfp8_e4m3")
    msg = str(e.value)
    print(f"Format('mxfp8_e4m3'): {msg}")
    assert msg.startswith("format 'mxfp8_e4m3' is a block format (element codes sharing a scale per block); this "
                          "needs an element format (")
    assert msg.endswith("; mpsim.round, mpsim.encode and mpsim.decode_blocks take it")
    assert "--" not in msg and "mpsim round" not in msg


def test_format_options_hold_where_no_keyword_sets_them():
    """Format.with_options and mpsim.round / encode keep a Format's subnormals and overflow where no keyword
    is given (they were reset to keep / inf by the keywords' defaults); a keyword given still sets them. The
    expected values are numpy's: float16 casts (inf beyond the range), clipped to +-65504 for saturation (which
    takes +-inf to +-max_finite too: Overflow::saturate, lib/mpsim/format/format.hpp), and subnormal results
    flushed to a zero of the input's sign."""
    sat = mpsim.Format("fp16").with_options(overflow="saturate")
    both = sat.with_options(subnormals="flush")
    print(f"with_options(overflow='saturate'): {sat!r}; then with_options(subnormals='flush'): {both!r}")
    assert (sat.subnormals, sat.overflow) == ("keep", "saturate")
    assert (both.subnormals, both.overflow) == ("flush", "saturate")
    assert both.with_options(overflow="inf").overflow == "inf"
    assert both.with_options().overflow == "saturate"

    x = np.array([1e5, -7e4, 65504, 65520, 1.0, 3e-6, -1e-7, 6.2e-5, 0.0, np.inf, -np.inf], dtype=np.float32)
    with np.errstate(over="ignore"):
        f16 = x.astype(np.float16).astype(np.float32)
    saturated = np.clip(f16, -65504, 65504)
    flushed = np.where(np.abs(f16) < 2.0 ** -14, np.float32(0) * np.sign(x), saturated)
    cases = [("Format fp16, saturate", mpsim.round(x, sat), saturated),
             ("Format fp16, saturate, flush", mpsim.round(x, both), flushed),
             ("Format fp16, saturate; overflow='inf' given", mpsim.round(x, sat, overflow="inf"), f16),
             ("'fp16'", mpsim.round(x, "fp16"), f16),
             ("encode, saturate", mpsim.decode(mpsim.encode(x, sat), "fp16"), saturated)]
    for name, got, want in cases:
        mismatches = int(np.sum(got.view(np.uint32) != want.astype(np.float32).view(np.uint32)))
        print(f"{name}: {x.size} values, {mismatches} mismatches against numpy")
        assert mismatches == 0, (name, got, want)
