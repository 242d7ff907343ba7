"""`pip install .` at the repository root into a fresh venv (meson-python builds the module alone), then the
installed package gives the same bits as the development build. Runs with MPSIM_EXHAUSTIVE_FULL=1
(./run test-full): it compiles the module again and fetches the build requirements from PyPI."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import mpsim

pytestmark = pytest.mark.skipif(os.environ.get("MPSIM_EXHAUSTIVE_FULL") != "1",
                                reason="./run test-full only (MPSIM_EXHAUSTIVE_FULL=1)")


def test_pip_install_builds_and_matches(tmp_path):
    root = os.environ["MPSIM_SOURCE_ROOT"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    t0 = time.time()
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", root],
                       capture_output=True, text=True, cwd=str(tmp_path))
    print(f"pip install . took {time.time() - t0:.0f} s (exit {r.returncode})")
    assert r.returncode == 0, r.stderr[-4000:]
    x = np.exp(np.random.default_rng(1).uniform(-40, 12, 1 << 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, mpsim; assert 'site-packages' in mpsim.__file__, mpsim.__file__; "
            "x = np.load(sys.argv[1]); np.save(sys.argv[2], mpsim.encode(x, 'fp8_e5m2', 'sr', seed=5))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([py, "-c", code, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")], check=True, env=env,
                   cwd=str(tmp_path))
    got = np.load(tmp_path / "y.npy")
    assert np.array_equal(got, mpsim.encode(x, "fp8_e5m2", "sr", seed=5))
    print(f"the installed package: {x.size} values, same encodings as the development build")
