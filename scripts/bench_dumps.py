#!/usr/bin/env python3
"""mpsim.dumps (python/mpsim/dumps.py) against `mpsim underflow` on the same tree of .npy files, in one process.

Two trees of log-uniform float32 values (magnitudes 2^-30..2^20, random signs): a few large files and many small
ones (the per-file cost of a task). Jobs, interleaved, the median of --repeats (files in the page cache):
  mpsim underflow DIR --json            the command line (one process, its memory-mapped streaming reader)
  loop: np.load + UnderflowCounter.add  the Python path without Dask (the floor of a task's work), with
                                        MassLostCounter.add (the gradient mass lost)
  dumps.analyse(scheduler="sync")       the Dask graph on one thread (default partitioning); also without the
                                        gradient mass lost (mass_log2_scales=(), its hist report)
  dumps.analyse(scheduler="threads")    the Dask graph on the local thread pool (the default scheduler): one file
                                        per task, the default partitioning (DEFAULT_TASKS tasks), 32 files per task
Each job's underflow report is checked against the command line's (equal, tensor labels apart) before it is timed.
The machine may be shared: read the ratios of one run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import mpsim
from mpsim import dumps


def make_tree(root, files, n, seed):
    os.makedirs(root)
    rng = np.random.default_rng(seed)
    for i in range(files):
        mag = np.exp2(rng.uniform(-30.0, 20.0, n)).astype(np.float32)
        np.save(os.path.join(root, f"t{i:05d}.npy"), np.where(rng.integers(0, 2, n) == 1, -mag, mag))


def cli_report(binary, root, out):
    subprocess.run([binary, "underflow", root, "--format", "fp16", "--json", out], check=True, capture_output=True)
    return json.load(open(out))


def loop_report(root):
    counters, masses, total = {}, [], mpsim.MassLostCounter("fp16")
    for f in sorted(os.listdir(root)):
        c, m = mpsim.UnderflowCounter("fp16"), mpsim.MassLostCounter("fp16")
        x = np.load(os.path.join(root, f), mmap_mode="r")
        c.add(x)
        m.add(x)
        counters[f] = c
        masses.append(m)
        total.merge(m)
    report = json.loads(mpsim.underflow_report_json(counters))
    for t, m in zip(report["tensors"], masses):
        t.update(m.stats())
    report["total"].update(total.stats())
    return report


def comparable(report):
    r = {k: v for k, v in report.items() if k not in ("files", "skipped_files", "failed")}
    r["tensors"] = [{k: v for k, v in t.items() if k not in ("tensor", "dump")} for t in report["tensors"]]
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpsim", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "mpsim"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--large", default="16x2097152", help="FILESxVALUES of the large-file tree")
    p.add_argument("--small", default="512x1024", help="FILESxVALUES of the many-file tree")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for tree, spec in [("large", a.large), ("small", a.small)]:
            files, n = map(int, spec.split("x"))
            root = os.path.join(tmp, tree)
            make_tree(root, files, n, 20261128)
            out = os.path.join(tmp, "cli.json")
            jobs = {
                "mpsim underflow (command line)": lambda: cli_report(a.mpsim, root, out),
                "loop: np.load + UnderflowCounter.add": lambda: loop_report(root),
                "dumps.analyse, sync": lambda: dumps.analyse(root, "fp16", scheduler="sync", by=()).underflow(),
                # Without the gradient mass lost (its rounding pass): hist() needs no mass, and is not compared.
                "dumps.analyse, sync, no mass lost (hist)":
                    lambda: dumps.analyse(root, "fp16", scheduler="sync", by=(), mass_log2_scales=()).hist(),
                "dumps.analyse, threads, 1 file per task":
                    lambda: dumps.analyse(root, "fp16", by=(), files_per_task=1).underflow(),
                f"dumps.analyse, threads, default ({dumps.DEFAULT_TASKS} tasks)":
                    lambda: dumps.analyse(root, "fp16", by=()).underflow(),
                "dumps.analyse, threads, 32 files per task":
                    lambda: dumps.analyse(root, "fp16", by=(), files_per_task=32).underflow(),
            }
            want = comparable(jobs["mpsim underflow (command line)"]())
            for name, job in jobs.items():
                if "(hist)" in name:
                    continue
                got = comparable(job())
                if got != want:
                    sys.exit(f"{name}: the report differs from the command line's")
            times = {name: [] for name in jobs}
            for _ in range(a.repeats):
                for name, job in jobs.items():
                    t0 = time.perf_counter()
                    job()
                    times[name].append(time.perf_counter() - t0)
            base = statistics.median(times["mpsim underflow (command line)"])
            print(f"{tree}: {files} files of {n} float32 values ({files * n * 4 / 2**20:.0f} MiB), median of "
                  f"{a.repeats}, reports checked equal to the command line's")
            print("| job | seconds | × command line | MB/s |\n|---|---|---|---|")
            for name, t in times.items():
                m = statistics.median(t)
                print(f"| {name} | {m:.3f} | {m / base:.2f} | {files * n * 4 / m / 1e6:.0f} |")
            print()


if __name__ == "__main__":
    main()
