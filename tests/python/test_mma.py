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


def test_mi250_equals_a_float32_pairwise_sum():
    # The mi250 profile (MI210MC.m: subnormal inputs read as zero, each product rounded to fp32, blocks of 4
    # summed as (p0 + p1) + (p2 + p3) in fp32, then c + that, fp32 results below 2^-126 flushed) written
    # again here in numpy float32 arithmetic, on fp16 values spanning subnormals to 2^15.
    rng = np.random.default_rng(5)
    M, K, N = 6, 37, 5
    a = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-26, 8, (M, K)))).astype(np.float16).astype(np.float64)
    b = (rng.standard_normal((K, N)) * np.exp2(rng.integers(-26, 8, (K, N)))).astype(np.float16).astype(np.float64)
    got = mpsim.matmul(a, b, model="mi250", input="fp16")
    tiny = np.float32(2.0 ** -126)

    def flush(x):
        return np.where(np.abs(x) < tiny, x * np.float32(0), x)

    A = np.where(np.abs(a) < 2.0 ** -14, 0.0, a)
    B = np.where(np.abs(b) < 2.0 ** -14, 0.0, b)
    pad = (-K) % 4
    A = np.pad(A, ((0, 0), (0, pad)))
    B = np.pad(B, ((0, pad), (0, 0)))
    acc = np.zeros((M, N), dtype=np.float32)
    for k0 in range(0, K + pad, 4):
        p = [flush((A[:, k0 + i, None] * B[None, k0 + i, :]).astype(np.float32)) for i in range(4)]
        acc = flush(acc + flush(flush(p[0] + p[1]) + flush(p[2] + p[3])))
    mismatches = int(np.count_nonzero(got.view(np.uint32) != acc.view(np.uint32)))
    exact = mpsim.matmul(a, b, model="mi100", input="fp16")  # one rounding per block: what the test must tell apart
    differ = int(np.count_nonzero(exact.view(np.uint32) != acc.view(np.uint32)))
    print(f"mi250 fp16: {M * N} outputs of K={K} against a numpy float32 pairwise sum, {mismatches} mismatches "
          f"(mi100's exact blocks differ from that sum in {differ})")
    assert mismatches == 0 and differ > 0
    with pytest.raises(ValueError, match="mi300x"):
        mpsim.matmul(a, b, model="mi300x", input="fp8_e4m3")
