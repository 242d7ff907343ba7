"""mpsim.matmul (python/mpsim/_mma.py over lib/mpsim/mma) against recorded GPU results
(data/mma/recorded/, from north-numerical-computing/MATLAB-tensor-core), and its errors."""
import os
import pathlib

import ml_dtypes
import numpy as np
import pytest

import mpsim

ROOT = pathlib.Path(os.environ.get("MPSIM_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[2]))
RECORDED = ROOT / "data" / "mma" / "recorded"
STORED = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "bf16": ml_dtypes.bfloat16}
INPUT = {"e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2", "bf16": "bf16", "fp16": "fp16", "tf32": "tf32"}


def load(gpu, fmt):
    z = np.load(RECORDED / f"{gpu}_{fmt}.npz")
    a, b = z["a"], z["b"]
    if fmt in STORED:
        a, b = a.view(STORED[fmt]), b.view(STORED[fmt])
    return a.astype(np.float64), b.astype(np.float64), z["c"].astype(np.float64), z


@pytest.mark.parametrize("gpu,fmt,out", [("h100", "e4m3", "fp16"), ("b200", "e5m2", "fp32"), ("a100", "bf16", "fp32"),
                                         ("v100", "fp16", "fp16")])
def test_matmul_equals_recorded_gpu_results(gpu, fmt, out):
    a, b, c, z = load(gpu, fmt)
    n = 200
    # One GEMM whose diagonal holds n recorded dot products: D[i, i] = c_i + a_i . b_i.
    C = np.zeros((n, n))
    C[np.arange(n), np.arange(n)] = c[:n]
    D = mpsim.matmul(a[:n], b[:n].T, gpu, c=C, input=INPUT[fmt], output=out)
    got = np.diagonal(D).copy().view(np.uint32)
    want = z["d_" + out][:n].view(np.uint32)
    mismatches = int(np.count_nonzero(got != want))
    print(f"{gpu} {fmt} -> {out}: {n} recorded cases, {mismatches} mismatches")
    assert mismatches == 0


def test_inputs_outside_the_format_are_rounded_first():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 40))
    b = rng.standard_normal((40, 7))
    a16 = a.astype(np.float16).astype(np.float64)
    b16 = b.astype(np.float16).astype(np.float64)
    d = mpsim.matmul(a, b, "h100", input="fp16")
    d16 = mpsim.matmul(a16, b16, "h100", input="fp16")
    assert np.array_equal(d.view(np.uint32), d16.view(np.uint32))
    # exact-fp32 with K=1 is one correctly rounded product: compare with numpy.
    e = mpsim.matmul(a16[:, :1], b16[:1, :], "exact-fp32", input="fp16")
    assert np.array_equal(e, (a16[:, :1] @ b16[:1, :]).astype(np.float32))


def test_torch_tensors_are_taken():
    torch = pytest.importorskip("torch")
    a = torch.randn(4, 16, dtype=torch.float16)
    b = torch.randn(16, 3, dtype=torch.float16)
    d = mpsim.matmul(a, b, "a100")
    assert np.array_equal(d, mpsim.matmul(a.double().numpy(), b.double().numpy(), "a100"))


def test_errors_name_the_problem():
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match="columns must equal"):
        mpsim.matmul(a, np.ones((4, 2)), "h100")
    with pytest.raises(ValueError, match="known: v100"):
        mpsim.matmul(a, np.ones((3, 2)), "h900")
    with pytest.raises(ValueError, match="fp16 out only"):
        mpsim.matmul(a, np.ones((3, 2)), "h100", input="bf16", output="fp16")
    assert "h100" in mpsim.matmul_models()
