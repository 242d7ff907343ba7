"""mpsim.torch.emulate(model, format, mma=MODEL): the products of Linear, matmul / bmm / addmm and attention added
as the matrix unit adds them, forward and backward, against mpsim.matmul on the same operands, computed here
from the unrounded tensors (python/mpsim/torch/emulate.py, docs/torch.md#matrix-units)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpsim  # noqa: E402
import mpsim.torch  # noqa: E402


def r16(t):
    """t rounded to fp16 (nearest-even), as the emulation's sites round: torch's own cast, independent of mpsim."""
    return t.detach().to(torch.float16).to(torch.float32)


def unit(a, b, model="h100", promote=0):
    return torch.from_numpy(mpsim.matmul(a.detach().numpy(), b.detach().numpy(), model=model, input="fp16",
                                         promote_every=promote))


def bits_differ(x, y):
    return int((x.detach().contiguous().view(torch.int32) != y.detach().contiguous().view(torch.int32)).sum())


@pytest.mark.parametrize("model,promote", [("h100", 0), ("v100", 0), ("h100", 32)])
def test_linear_forward_and_backward_equal_the_unit(model, promote):
    torch.manual_seed(0)
    lin = nn.Linear(96, 40)
    x = (torch.randn(24, 96) * 4).requires_grad_()
    dy = torch.randn(24, 40)
    with mpsim.torch.emulate(lin, "fp16", mma=model, mma_promote=promote):
        y = lin(x)
        y.backward(dy)
    # Independently: operands rounded to fp16, the unit's fp32 product, the bias added in fp32, the output rounded;
    # backward: dy rounded (out_grad), dx = dy W under the unit then rounded (in_grad), dW = dy^T x likewise (w_grad).
    xr, wr, br = r16(x), r16(lin.weight), r16(lin.bias)
    want_y = r16(unit(xr, wr.t(), model, promote) + br)
    dyr = r16(dy)
    want_dx = r16(unit(dyr, wr, model, promote))
    want_dw = r16(unit(dyr.t(), xr, model, promote))
    got = {"y": bits_differ(y, want_y), "dx": bits_differ(x.grad, want_dx), "dW": bits_differ(lin.weight.grad, want_dw)}
    print(f"{model} promote {promote}: y {y.numel()}, dx {x.grad.numel()}, dW {lin.weight.grad.numel()} values; "
          f"mismatches {got}")
    assert got == {"y": 0, "dx": 0, "dW": 0}


def test_matmul_bmm_and_addmm_equal_the_unit():
    torch.manual_seed(1)

    class Products(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(48, 48)

        def forward(self, a, b, c):
            h = self.lin(a)                          # (4, 8, 48)
            s = torch.bmm(h, b)                      # (4, 8, 16)
            m = h @ b[0]                             # broadcast matmul, (4, 8, 16)
            t = torch.addmm(c, a[0], b[0])           # (8, 16)
            return s, m, t

    model = Products()
    a, b, c = torch.randn(4, 8, 48), torch.randn(4, 48, 16), torch.randn(8, 16)
    with mpsim.torch.emulate(model, "fp16", mma="a100"):
        s, m, t = model(a, b, c)
    h = r16(unit(r16(a).reshape(-1, 48), r16(model.lin.weight).t(), "a100") + r16(model.lin.bias)).reshape(4, 8, 48)
    want_s = torch.stack([r16(unit(h[i], r16(b[i]), "a100")) for i in range(4)])
    want_m = torch.stack([r16(unit(h[i], r16(b[0]), "a100")) for i in range(4)])
    want_t = r16(unit(r16(a[0]), r16(b[0]), "a100") + r16(c))
    got = (bits_differ(s, want_s), bits_differ(m, want_m), bits_differ(t, want_t))
    print(f"bmm {s.numel()}, matmul {m.numel()}, addmm {t.numel()} outputs: mismatches {got}")
    assert got == (0, 0, 0)


def test_attention_products_run_on_the_unit():
    torch.manual_seed(2)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(32, 32)

        def forward(self, x):
            q = self.q(x)
            return nn.functional.scaled_dot_product_attention(q, x, x)

    model = Attn()
    x = torch.randn(2, 6, 32)
    with mpsim.torch.emulate(model, "fp16", mma="h100"):
        out = model(x)
    q = r16(unit(r16(x).reshape(-1, 32), r16(model.q.weight).t()) + r16(model.q.bias)).reshape(2, 6, 32)
    want = []
    for i in range(2):
        scores = r16(unit(r16(q[i] * (1 / 32 ** 0.5)), r16(x[i]).t()))
        want.append(r16(unit(r16(torch.softmax(scores, -1)), r16(x[i]))))
    n = bits_differ(out, torch.stack(want))
    print(f"sdpa under h100: {out.numel()} outputs, {n} mismatches")
    assert n == 0


def test_the_unit_truncates_and_promotion_recovers():
    # One product 1 x 1 and 49,152 products 2^-13 x 2^-13 = 2^-26. H100's fp16 unit keeps 25 fraction bits below
    # the largest exponent of a block and its accumulator (docs/mma.md), so with the sum near 1 each 2^-26 is
    # truncated away and the result stays 1. Exactly, the sum is 1 + 49152 * 2^-26 = 1 + 1.5 * 2^-11, which rounds
    # to 1 + 2^-10 in fp16; promoted every 128 elements, the chunks without the 1 keep their 2^-26 terms (128 of
    # them, 2^-19, well inside 25 bits) and the fp32 accumulator adds them, so the same 1 + 2^-10 comes out.
    K = 1 + 49152
    a = torch.full((1, K), 2.0 ** -13)
    b = torch.full((K, 1), 2.0 ** -13)
    a[0, 0] = b[0, 0] = 1.0
    exact = (a.double() @ b.double()).to(torch.float16).item()

    class MatMul(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))  # emulate() needs a module with parameters

        def forward(self, a, b):
            return a @ b

    model = MatMul()
    with mpsim.torch.emulate(model, "fp16", mma="h100"):
        on_unit = model(a, b).item()
    with mpsim.torch.emulate(model, "fp16", mma="h100", mma_promote=128):
        promoted = model(a, b).item()
    with mpsim.torch.emulate(model, "fp16"):
        torch_fp32 = model(a, b).item()  # printed only: how torch's CPU GEMM orders its fp32 sum is its own
    print(f"h100: {on_unit}, promoted every 128: {promoted}, exact in fp16: {exact}; torch's fp32 GEMM: {torch_fp32}")
    assert exact == 1.0 + 2.0 ** -10
    assert on_unit == 1.0
    assert promoted == exact


def test_bad_mma_arguments_are_refused_naming_them():
    lin = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="nosuchgpu"):
        mpsim.torch.emulate(lin, "fp16", mma="nosuchgpu")
    with pytest.raises(ValueError, match="fp8_e4m3|fp16"):
        mpsim.torch.emulate(lin, "fp8_e4m3", mma="v100")  # V100 has no fp8 unit
    with pytest.raises(ValueError, match="grad_format"):
        mpsim.torch.emulate(lin, "fp16", grad_format="bf16", mma="h100")
    with pytest.raises(ValueError, match="mma_promote"):
        mpsim.torch.emulate(lin, "fp16", mma="h100", mma_promote=-1)
    with pytest.raises(ValueError, match="recipe"):
        mpsim.torch.emulate(lin, recipe="fp8-tensorwise-current", mma="h100")
    with pytest.raises(ValueError, match="Conv2d"):
        mpsim.torch.emulate(nn.Sequential(nn.Conv2d(1, 1, 3), nn.Flatten()), "fp16", mma="h100")
    with pytest.raises(ValueError, match="LSTM"):
        mpsim.torch.emulate(nn.LSTM(4, 4), "fp16", mma="h100")
    # Nothing was left installed by the refusals.
    assert mpsim.torch.Emulation.of(lin) is None
    np.testing.assert_equal(lin(torch.ones(1, 4)).detach().numpy(), nn.functional.linear(
        torch.ones(1, 4), lin.weight, lin.bias).detach().numpy())
