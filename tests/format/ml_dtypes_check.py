#!/usr/bin/env python3
"""mpsim's element types against ml_dtypes (PyPI), bit for bit, through the mpsim command line.

For every ml_dtypes element type mpsim names, float32 inputs are rounded by `mpsim round --to TYPE --bits`
and by ml_dtypes' own cast (`x.astype(ml_dtypes.TYPE)`), and the encodings are compared.

Inputs (default, the unit suite): every value of the type, every midpoint between neighbouring values and
the float32 one ulp either side of each, a seeded sample of random float32 bit patterns and of log-uniform
magnitudes around the type's range, and the special values (±0, ±inf, NaNs with payloads, float32
subnormals, the float32 extremes). With MPSIM_EXHAUSTIVE_FULL=1 (./run test-full) or --full: every one of
the 2^32 float32 bit patterns per type.

Known differences (docs/formats.md), counted and printed apart, never accepted elsewhere:
  * float8_e8m0fnu, float32 subnormal inputs in (2^-127, 1.5 * 2^-127): ml_dtypes 0.6 gives 2^-126, mpsim the
    nearest value 2^-127 (ml_dtypes rounds the float32 subnormal's bits, which are not its exponent and mantissa);
  * NaN inputs to the IEEE-style types (float8_e4m3, float8_e3m4, float8_e5m2, bfloat16): both give a NaN of the
    input's sign, ml_dtypes the canonical quiet NaN, mpsim the quiet NaN with the top payload bits kept (what x86
    F16C and AVX512-BF16 do, and what mpsim's hardware comparisons rely on).

Exit status 0 when every other input matches, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import ml_dtypes
except ImportError:  # the venv ./run makes installs it (notebooks/requirements.txt)
    sys.exit("ml_dtypes_check: ml_dtypes is not installed in this Python; run ./run deps")

# mpsim's name -> the ml_dtypes type it must equal.
TYPES = [
    "float8_e4m3", "float8_e3m4", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "bfloat16",
]


def storage(t):
    return np.uint16 if ml_dtypes.finfo(t).bits > 8 else np.uint8


def all_values(t):
    """Every encoding of t and its value as float64 (NaNs included)."""
    st = storage(t)
    bits = ml_dtypes.finfo(t).bits
    enc = np.arange(1 << bits, dtype=np.uint32).astype(st)
    with np.errstate(invalid="ignore"):
        return enc.view(t).astype(np.float64)


def structured_inputs(t, rng):
    vals = all_values(t)
    finite = np.unique(vals[np.isfinite(vals)])  # sorted, -0 and +0 merged
    mids = (finite[:-1] + finite[1:]) / 2  # exact in float64; in float32 too (one more bit than the type)
    m32 = mids.astype(np.float32)
    up = np.nextafter(m32, np.float32(np.inf))
    down = np.nextafter(m32, np.float32(-np.inf))
    fi = ml_dtypes.finfo(t)
    lo = max(float(fi.smallest_subnormal), 2.0**-149) / 8
    hi = min(float(fi.max) * 8, 3.0e38)
    logu = np.exp(rng.uniform(np.log(lo), np.log(hi), 50_000)).astype(np.float32)
    logu = np.concatenate([logu, -logu])
    rand_bits = rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special_bits = np.array(
        [0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,
         0x7fffffff, 0xffffffff, 0x7fa00000, 0x00000001, 0x80000001, 0x00400000, 0x00400001, 0x005fffff,
         0x00600000, 0x00600001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f000000, 0x7f400000],
        dtype=np.uint32).view(np.float32)
    x = np.concatenate([finite.astype(np.float32), m32, up, down, logu, rand_bits, special_bits])
    return x, len(finite), len(mids)


def mpsim_bits(mpsim, name, x, work):
    src = os.path.join(work, "in.npy")
    dst = os.path.join(work, "out.npy")
    np.save(src, x)
    subprocess.run([mpsim, "round", "--to", name, "--bits", src, dst], check=True, stdout=subprocess.DEVNULL)
    return np.load(dst)


def e8m0_known_difference(x):
    """float32 subnormals in (2^-127, 1.5 * 2^-127): bits 0x400001 .. 0x5fffff."""
    b = x.view(np.uint32)
    return (b > 0x400000) & (b < 0x600000)


def compare(name, x, got, t):
    with np.errstate(invalid="ignore"):
        want = x.astype(t).view(storage(t))
    if got.dtype != want.dtype or got.shape != want.shape:
        raise SystemExit(f"{name}: mpsim wrote {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
    diff = got != want
    known = np.zeros_like(diff)
    if name == "float8_e8m0fnu":
        known = diff & e8m0_known_difference(x)
    with np.errstate(invalid="ignore"):
        got_v = got.view(t).astype(np.float32)
        want_v = want.view(t).astype(np.float32)
    same_sign = np.signbit(got_v) == np.signbit(want_v)
    payload = diff & np.isnan(x) & np.isnan(got_v) & np.isnan(want_v) & same_sign
    bad = diff & ~known & ~payload
    return int(bad.sum()), int(known.sum()), int(payload.sum()), np.nonzero(bad)[0][:5], want


def check_constants(mpsim, names):
    """`mpsim formats --print-json` against ml_dtypes.finfo: max, smallest normal and subnormal, epsilon, bits."""
    table = {f["name"]: f for f in json.loads(subprocess.run([mpsim, "formats", "--print-json"], check=True,
                                                             capture_output=True, text=True).stdout)}
    alias = {"bfloat16": "bf16", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
             "float8_e4m3fnuz": "fp8_e4m3fnuz", "float8_e5m2fnuz": "fp8_e5m2fnuz"}
    bad = 0
    for name in names:
        fi = ml_dtypes.finfo(getattr(ml_dtypes, name))
        row = table.get(alias.get(name, name))
        if row is None:
            print(f"{name}: missing from `mpsim formats`")
            bad += 1
            continue
        pairs = [("max_finite", float(fi.max)), ("min_normal", float(fi.tiny)),
                 ("min_subnormal", float(fi.smallest_subnormal)), ("epsilon", float(fi.eps)),
                 ("storage_bits", fi.bits), ("man_bits", fi.nmant)]
        wrong = [(k, row[k], v) for k, v in pairs if row[k] != v]
        bad += len(wrong)
        print(f"{name:20s} constants {'ok' if not wrong else wrong} (max {row['max_finite']}, "
              f"min normal {row['min_normal']}, min subnormal {row['min_subnormal']}, eps {row['epsilon']})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpsim", default=os.environ.get("MPSIM_BIN"), help="the mpsim executable (MPSIM_BIN)")
    ap.add_argument("--full", action="store_true", default=os.environ.get("MPSIM_EXHAUSTIVE_FULL") == "1",
                    help="every float32 bit pattern (MPSIM_EXHAUSTIVE_FULL=1)")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated subset of the types")
    ap.add_argument("--seed", type=int, default=20261125)
    args = ap.parse_args()
    if not args.mpsim:
        sys.exit("ml_dtypes_check: give --mpsim or set MPSIM_BIN")
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}; mpsim {args.mpsim}; "
          f"{'every float32 input' if args.full else 'structured sample'}")
    rng = np.random.default_rng(args.seed)
    failures = check_constants(args.mpsim, args.types.split(","))
    total = 0
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="mpsim-ml-dtypes-") as work:
        for name in args.types.split(","):
            t = getattr(ml_dtypes, name)
            checked = bad = known = payloads = 0
            examples = []
            if args.full:
                chunk = 1 << 26
                for start in range(0, 1 << 32, chunk):
                    x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
                    got = mpsim_bits(args.mpsim, name, x, work)
                    b, k, pl, where, want = compare(name, x, got, t)
                    checked += x.size
                    bad += b
                    known += k
                    payloads += pl
                    examples += [(x[i], got[i], want[i]) for i in where][: 5 - len(examples)]
                detail = "all 2^32 float32 inputs"
            else:
                x, nvals, nmids = structured_inputs(t, rng)
                got = mpsim_bits(args.mpsim, name, x, work)
                bad, known, payloads, where, want = compare(name, x, got, t)
                checked = x.size
                examples = [(x[i], got[i], want[i]) for i in where]
                detail = f"{nvals} values, {nmids} midpoints x 3, {x.size - nvals - 3 * nmids} sampled/special"
            total += checked
            failures += bad
            note = f", {known} known e8m0 float32-subnormal differences" if known else ""
            if payloads:
                note += f", {payloads} NaN inputs where both give a NaN of the input's sign (payload kept by mpsim)"
            print(f"{name:20s} {checked:11d} inputs ({detail}): {bad} mismatches{note}")
            for xi, g, w in examples:
                print(f"    input {float(xi)!r} (0x{int(np.float32(xi).view(np.uint32)):08x}): "
                      f"mpsim 0x{int(g):x}, ml_dtypes 0x{int(w):x}")
    print(f"total {total} inputs compared, {failures} mismatches, {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
