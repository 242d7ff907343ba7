"""Shared fixtures of the Python module's tests: the mpsim command line (MPSIM_BIN, set by meson) and a
helper that runs it on arrays, so that every test can put the same input through the CLI and the module."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

SOURCE_ROOT = os.environ.get("MPSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
# tests/format/ml_dtypes_check.py: its input generator and its comparison with ml_dtypes (known differences
# counted apart) are reused here rather than written twice.
sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "format"))


@pytest.fixture(scope="session")
def mpsim_bin():
    path = os.environ.get("MPSIM_BIN")
    if not path or not os.path.exists(path):
        pytest.skip("MPSIM_BIN (the mpsim command line) is not set; meson test sets it")
    return path


class Cli:
    def __init__(self, binary, work):
        self.binary = binary
        self.work = work
        self.n = 0

    def path(self, name):
        self.n += 1
        return os.path.join(self.work, f"{self.n}_{name}")

    def run(self, *args):
        r = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"mpsim {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
        return r.stdout

    def round(self, x, *options, stats=False):
        """`mpsim round` on x: (output array or npz dict, stats JSON or None)."""
        src, dst, js = self.path("in.npy"), self.path("out.npy"), self.path("stats.json")
        np.save(src, x)
        extra = ["--stats-json", js] if stats else []
        self.run("round", *options, *extra, src, dst)
        out = np.load(dst)
        if isinstance(out, np.lib.npyio.NpzFile):
            out = dict(out)
        return out, (json.load(open(js)) if stats else None)

    def report(self, command, tensors, *options):
        """`mpsim hist|underflow` on an .npz of named tensors: the JSON report."""
        src, js = self.path("in.npz"), self.path("report.json")
        np.savez(src, **tensors)
        self.run(command, src, "--json", js, *options)
        return json.load(open(js))


@pytest.fixture
def cli(mpsim_bin, tmp_path):
    return Cli(mpsim_bin, str(tmp_path))


# A file whose tests all skipped (torch missing, the pip test outside ./run test-full) exits 77, which meson
# counts as SKIP, not as a pass.
_outcomes = {"passed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        _outcomes["passed"] += 1
    elif report.skipped:
        _outcomes["skipped"] += 1


def pytest_collectreport(report):
    if report.skipped:  # a module-level skip (pytest.importorskip("torch"))
        _outcomes["skipped"] += 1


def pytest_sessionfinish(session, exitstatus):
    # 5: pytest collected nothing, which a module-level skip gives.
    if exitstatus in (0, 5) and _outcomes["passed"] == 0 and _outcomes["skipped"] > 0:
        session.exitstatus = 77
