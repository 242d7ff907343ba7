"""mpsim.matmul: matrix products as a GPU matrix unit (tensor core) adds them (docs/mma.md)."""
import numpy as _np

from . import _core


def matmul(a, b, model, c=None, *, input="fp16", output="fp32", promote_every=0, threads=0):
    """D = C + A B under a matrix-unit model: ``mpsim.matmul(a, b, model="h100", input="fp8_e4m3")``.

    a (M, K), b (K, N) and c (M, N, optional) are numpy arrays, CPU torch tensors or anything numpy.asarray
    takes. Values that are not in the formats are rounded first, to nearest-even: a and b to ``input``, c to
    ``output`` (as ``mpsim gemm`` does). model: one of mpsim.matmul_models() ("v100", "a100", "a2", "ada",
    "l40s", "h100", "h200", "b200", "mi100", "mi250", "mi300x" (AMD, from the published CDNA models; fp32
    output; mi300x's fp8 is "fp8_e4m3fnuz" / "fp8_e5m2fnuz"), "exact-fp32", "fp16-acc"). promote_every: add
    the unit's partial sums into an fp32 accumulator every N elements of K (split accumulation). Returns a
    float32 numpy array;
    ValueError for an unknown model, formats the model does not take, or shapes that do not multiply.
    """
    a2 = _as_matrix(a, "a")
    b2 = _as_matrix(b, "b")
    if a2.shape[1] != b2.shape[0]:
        raise ValueError(f"a has shape {a2.shape} and b {b2.shape}: a's columns must equal b's rows")
    M, K = a2.shape
    N = b2.shape[1]
    if c is None:
        c2 = _np.empty(0, dtype=_np.float64)
    else:
        c2 = _as_matrix(c, "c")
        if c2.shape != (M, N):
            raise ValueError(f"c has shape {c2.shape} but a @ b is {(M, N)}")
    out = _np.empty((M, N), dtype=_np.float32)
    _core.mma_gemm_into(a2.reshape(-1), b2.reshape(-1), c2.reshape(-1), out.reshape(-1), M, N, K, model, input, output,
                        promote_every, threads)
    return out


def matmul_models():
    """The model names mpsim.matmul takes."""
    return list(_core.mma_models())


def _as_matrix(x, name):
    if type(x).__module__.split(".")[0] == "torch":
        x = x.detach().cpu().double().numpy()
    x = _np.ascontiguousarray(_np.asarray(x, dtype=_np.float64))
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got shape {x.shape}")
    return x
