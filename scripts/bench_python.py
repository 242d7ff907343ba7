#!/usr/bin/env python3
"""The Python module against the C++ bulk call and the Python casts, in one process (./run bench runs it).

2^26 float32 values (log-uniform magnitudes over 2^-30..2^20 with random signs, the data of bench_round and
bench_cli.py) are rounded, each job timed in the same run, interleaved, the median of --repeats:
  C++ round_array(x, out, fp16)             the bulk engine itself, timed in C++ (mpsim._core._time_round_array)
  mpsim.round(x, "fp16", out=y)             the Python call into a preallocated array (target <= 1.2x the above)
  mpsim.round(x, "fp16")                    allocating its result, as astype does
  x.astype(np.float16)                      numpy
  mpsim.encode(x, "fp8_e4m3")               vs ml_dtypes x.astype(float8_e4m3fn)
  mpsim.round(t, "fp16") / t.to(float16)    torch CPU tensors, where torch is importable
  np.copyto(y, x)                           a memory copy, the floor
  UnderflowCounter(F).add(x)                fp16, bf16, fp8 e4m3, e5m2, with and without moments, against the C++
                                            RangeCounter::add and Moments::add (timed in C++), in ns per value;
                                            and all four formats by add() on each against one add_many pass
Every mpsim result is checked against its baseline (bit for bit, as the tests do) before it is timed.
Writes a CSV with --csv. The machine may be shared: ratios from the same run are what to read.
"""
import argparse
import csv
import os
import statistics
import sys
import time

import numpy as np

import mpsim

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
try:
    import torch
except ImportError:
    torch = None


def log_uniform(n, seed):
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-30.0, 20.0, n)).astype(np.float32)
    return np.where(rng.integers(0, 2, n) == 1, -mag, mag)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2-n", type=int, default=26)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    n = 1 << a.log2_n
    x = log_uniform(n, 1)
    y = np.empty_like(x)
    fp16 = mpsim.Format("fp16")

    np.seterr(over="ignore")  # numpy's float16 cast warns on values beyond 65504 (they become inf, as in mpsim)
    # Correctness first: what is timed must be what the tests check.
    assert np.array_equal(mpsim.round(x, "fp16"), x.astype(np.float16).astype(np.float32))
    if ml_dtypes is not None:
        assert np.array_equal(mpsim.encode(x, "fp8_e4m3"), x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    jobs = {
        "memcpy np.copyto(y, x)": lambda: np.copyto(y, x),
        "C++ round_array fp16 (bulk call)": lambda: mpsim._core._time_round_array(x, y, fp16, 1),
        "mpsim.round(x, 'fp16', out=y)": lambda: mpsim.round(x, "fp16", out=y),
        "mpsim.round(x, 'fp16')": lambda: mpsim.round(x, "fp16"),
        "mpsim.encode(x, 'fp16')": lambda: mpsim.encode(x, "fp16"),
        "numpy x.astype(float16)": lambda: x.astype(np.float16),
        "mpsim.encode(x, 'fp8_e4m3')": lambda: mpsim.encode(x, "fp8_e4m3"),
    }
    if ml_dtypes is not None:
        jobs["ml_dtypes x.astype(float8_e4m3fn)"] = lambda: x.astype(ml_dtypes.float8_e4m3fn)
    if torch is not None:
        t = torch.from_numpy(x)
        ty = torch.empty_like(t)
        assert torch.equal(mpsim.round(t, "fp16"), t.to(torch.float16).float())
        jobs["mpsim.round(t, 'fp16', out=ty) torch"] = lambda: mpsim.round(t, "fp16", out=ty)
        jobs["torch t.to(float16)"] = lambda: t.to(torch.float16)
        jobs["mpsim.encode(t, 'fp16') torch"] = lambda: mpsim.encode(t, "fp16")

    times = {k: [] for k in jobs}
    for _ in range(a.repeats):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            r = job()
            dt = time.perf_counter() - t0
            # The C++ job reports its own time (the call alone, no Python around it).
            times[name].append(r if name.startswith("C++") else dt)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["C++ round_array fp16 (bulk call)"]
    copy = med["memcpy np.copyto(y, x)"]
    print(f"2^{a.log2_n} float32 log-uniform values, median of {a.repeats}; threads: mpsim {os.cpu_count()} "
          f"(engine default), torch {torch.get_num_threads() if torch else '-'}")
    print(f"{'job':42s} {'seconds':>9s} {'x C++ call':>11s} {'x memcpy':>9s} {'Mvalues/s':>10s}")
    rows = []
    for k, v in med.items():
        rows.append([k, v, v / base, v / copy, n / v / 1e6])
        print(f"{k:42s} {v:9.4f} {v / base:11.2f} {v / copy:9.1f} {n / v / 1e6:10.0f}")
    rows += counter_rows(x, a.repeats)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["job", "seconds", "ratio_to_cpp_call", "ratio_to_memcpy", "mvalues_per_s"])
            w.writerows(rows)
    return 0


def counter_rows(x, repeats):
    """UnderflowCounter.add per value against the C++ calls it makes (best of repeats: the counters are
    single-threaded, so the best is the least disturbed by other load)."""
    n = x.size
    print(f"\n{'UnderflowCounter.add, ns per value':42s} {'moments=False':>14s} {'C++ RangeCounter':>17s} "
          f"{'moments=True':>13s} {'C++ + Moments':>14s}")
    rows = []
    for fmt in ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]:
        def add(moments):
            best = float("inf")
            for _ in range(repeats):
                c = mpsim.UnderflowCounter(fmt, moments=moments)
                t0 = time.perf_counter()
                c.add(x)
                best = min(best, time.perf_counter() - t0)
            return best
        bare, full = add(False), add(True)
        cpp_range, cpp_moments = mpsim._core._time_counter_add(x, mpsim.Format(fmt), repeats)
        ns = [t / n * 1e9 for t in (bare, cpp_range, full, cpp_range + cpp_moments)]
        print(f"{fmt:42s} {ns[0]:14.2f} {ns[1]:17.2f} {ns[2]:13.2f} {ns[3]:14.2f}")
        for label, t in zip(["moments=False", "C++ RangeCounter::add", "moments=True", "C++ RangeCounter+Moments"],
                            (bare, cpp_range, full, cpp_range + cpp_moments)):
            rows.append([f"UnderflowCounter {fmt} {label}", t, "", "", n / t / 1e6])
    # The torch monitor's case: the same values counted in all four formats, by a counter each or in one pass.
    formats = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    def four(one_pass):
        best = float("inf")
        for _ in range(repeats):
            cs = [mpsim.UnderflowCounter(f, moments=False) for f in formats]
            t0 = time.perf_counter()
            if one_pass:
                mpsim.UnderflowCounter.add_many(cs, x)
            else:
                for c in cs:
                    c.add(x)
            best = min(best, time.perf_counter() - t0)
        return best
    each, many = four(False), four(True)
    print(f"{'all four: add() on each':42s} {each / n * 1e9:14.2f}")
    print(f"{'all four: UnderflowCounter.add_many':42s} {many / n * 1e9:14.2f}   ({each / many:.2f}x faster)")
    rows += [["UnderflowCounter four formats add each", each, "", "", n / each / 1e6],
             ["UnderflowCounter four formats add_many", many, "", "", n / many / 1e6]]
    return rows


if __name__ == "__main__":
    sys.exit(main())
