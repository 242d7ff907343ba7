#!/usr/bin/env python3
"""The command line against Python on the same job, timed in the same run (./run bench runs it).

A 256 MiB float32 .npy (2^26 values, log-uniform magnitudes over 2^-30..2^20 with random signs, as
bench_round uses) is rounded to fp16, bf16, fp8 e4m3 and fp8 e5m2 and written back as float32 values:
  mpsim round --to F in.npy out.npy          a whole process (start-up included)
  np.load -> np.save                          the floor for any tool that reads and writes the file
  numpy astype(float16) round trip            fp16 only (numpy has no other low-precision type)
  ml_dtypes astype(T) round trip              bf16, fp8 e4m3fn, fp8 e5m2
  cp in.npy out.npy                           copying the bytes, no parsing at all
Each Python job runs in its own process and times only load -> convert -> save (interpreter start-up
and imports left out, which favours Python); every job's peak resident memory comes from /usr/bin/time.
Jobs are interleaved, median of --repeats. Also checks that mpsim's bf16 / fp8 output equals ml_dtypes'
bit for bit (nearest-even, subnormals kept, no NaN in the input).

--large-gib N also rounds an N GiB file (written in pieces, never held in memory) to fp16 and prints
mpsim's peak resident memory, which does not grow with the input.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

FORMATS = [  # (mpsim name, Python baseline label, the Python expression of the type)
    ("fp16", "numpy astype(float16)", "np.float16"),
    ("bf16", "ml_dtypes bfloat16", "ml_dtypes.bfloat16"),
    ("fp8_e4m3", "ml_dtypes float8_e4m3fn", "ml_dtypes.float8_e4m3fn"),
    ("fp8_e5m2", "ml_dtypes float8_e5m2", "ml_dtypes.float8_e5m2"),
]

PY_JOB = """
import sys, time, numpy as np
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
t0, c0 = time.perf_counter(), time.process_time()
x = np.load(sys.argv[1])
{convert}
np.save(sys.argv[2], x)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def log_uniform(n, seed):
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-30.0, 20.0, n)).astype(np.float32)
    return np.where(rng.integers(0, 2, n) == 1, -mag, mag)


def timed(cmd, inner_time=False):
    """(seconds, CPU seconds, peak resident MiB) of a process; the times from its own report when inner_time.

    CPU time (user + system, all threads) is given beside the wall time because a loaded machine
    stretches wall times by whatever else runs; CPU time is what the job itself cost."""
    time_bin = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    prefix = [time_bin, "-f", "MAXRSS %M"] if time_bin else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(prefix + cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        sys.exit(f"bench_cli: {' '.join(cmd[:4])} ... failed: {r.stderr.strip()[-500:]}")
    rss = None
    for line in r.stderr.splitlines():
        if line.startswith("MAXRSS "):
            rss = int(line.split()[1]) / 1024
    if inner_time:
        wall, cpu = (float(v) for v in r.stdout.strip().splitlines()[-1].split())
    return wall, cpu, rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpsim", default=os.environ.get("MPSIM_BIN", "build-release/tools/mpsim"))
    ap.add_argument("--log2n", type=int, default=26, help="values in the file: 2^N float32 (default 26: 256 MiB)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the files go (default /dev/shm: the disk's speed left out)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--large-gib", type=float, default=0, help="also round a file of this many GiB (on --large-dir)")
    ap.add_argument("--large-dir", default=None, help="folder for the large file (default: the system temp folder)")
    args = ap.parse_args()
    try:
        import ml_dtypes  # noqa: F401
        have_ml_dtypes = True
    except ImportError:
        have_ml_dtypes = False
        print("bench_cli: ml_dtypes is not installed: its rows are left out", file=sys.stderr)

    work = tempfile.mkdtemp(prefix="mpsim-bench-cli-", dir=args.dir)
    try:
        src = os.path.join(work, "in.npy")
        n = 1 << args.log2n
        np.save(src, log_uniform(n, 1))
        size_mib = os.path.getsize(src) / 2**20
        out = os.path.join(work, "out.npy")

        jobs = {"np.load -> np.save": (["python", "np.load -> np.save", "pass"])}
        for fmt, label, typ in FORMATS:
            jobs[f"mpsim round --to {fmt}"] = ["mpsim", fmt]
            if typ.startswith("ml_dtypes") and not have_ml_dtypes:
                continue
            jobs[f"{label} round trip"] = ["python", label, f"x = x.astype({typ}).astype(np.float32)"]
        jobs["cp"] = ["cp"]

        def run(job):
            kind = job[0]
            if kind == "mpsim":
                return timed([args.mpsim, "round", "--to", job[1], src, out])
            if kind == "cp":
                return timed(["cp", src, out])
            return timed([sys.executable, "-c", PY_JOB.format(convert=job[2]), src, out], inner_time=True)

        results = {name: [] for name in jobs}
        for _ in range(args.repeats):
            for name, job in jobs.items():
                results[name].append(run(job))
                os.remove(out)

        # mpsim's output against ml_dtypes' (the same rounding: nearest-even, subnormals kept).
        checks = []
        if have_ml_dtypes:
            x = np.load(src)
            for fmt, label, typ in FORMATS:
                subprocess.run([args.mpsim, "round", "--to", fmt, src, out], check=True, capture_output=True)
                want = x.astype(eval(typ)).astype(np.float32)
                got = np.load(out)
                checks.append((fmt, label, int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))))
                os.remove(out)

        floor = statistics.median(s for s, _, _ in results["np.load -> np.save"])
        floor_cpu = statistics.median(c for _, c, _ in results["np.load -> np.save"])
        print(f"\nbench_cli: {n} float32 values ({size_mib:.0f} MiB) in {work}, median of {args.repeats} "
              f"(interleaved), {os.cpu_count()} CPUs")
        print(f"{'job':<40} {'seconds':>8} {'x floor':>8} {'CPU s':>8} {'x floor':>8} {'peak MiB':>9}")
        for name, rs in results.items():
            secs = statistics.median(s for s, _, _ in rs)
            cpu = statistics.median(c for _, c, _ in rs)
            rss = max((r for _, _, r in rs if r is not None), default=None)
            rss_text = "-" if rss is None else f"{rss:.0f}"
            print(f"{name:<40} {secs:8.3f} {secs / floor:8.2f} {cpu:8.3f} {cpu / floor_cpu:8.2f} {rss_text:>9}")
        for fmt, label, mismatches in checks:
            print(f"mpsim round --to {fmt} vs {label}: {mismatches} of {n} values differ")

        if args.large_gib > 0:
            large(args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def large(args):
    work = tempfile.mkdtemp(prefix="mpsim-bench-large-", dir=args.large_dir)
    try:
        src = os.path.join(work, "big.npy")
        n = int(args.large_gib * 2**30) // 4
        piece = 1 << 24
        # The header by numpy (format 1.0), the data appended piece by piece.
        mm = np.lib.format.open_memmap(src, mode="w+", dtype=np.float32, shape=(n,))
        for k in range(0, n, piece):
            mm[k:k + piece] = log_uniform(min(piece, n - k), k)
            mm.flush()
        del mm
        out = os.path.join(work, "big16.npy")
        secs, cpu, rss = timed([args.mpsim, "round", "--to", "fp16", src, out])
        print(f"\nmpsim round --to fp16 on {os.path.getsize(src) / 2**30:.2f} GiB ({n} values) in {work}: "
              f"{secs:.1f} s ({cpu:.1f} s CPU), peak resident {rss:.1f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
