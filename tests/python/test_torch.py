"""CPU torch tensors through the module without copies, against torch's own casts; non-CPU tensors and
unsupported dtypes rejected with a Python exception. Skipped where torch is not importable."""
import pytest

import mpsim

torch = pytest.importorskip("torch")


def sample(n=1 << 14):
    g = torch.Generator().manual_seed(20261125)
    x = torch.randn(n, generator=g) * torch.exp(torch.empty(n).uniform_(-30, 20, generator=g))
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 65504.0, 65520.0, 1 + 2.0**-11, 2.0**-24,
                            2.0**-25, 1 + 2.0**-8])
    return torch.cat([x, special])


def test_tensor_round_matches_torch_casts():
    x = sample().reshape(2, -1)
    for fmt, dtype in [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp8_e4m3", torch.float8_e4m3fn),
                       ("fp8_e5m2", torch.float8_e5m2)]:
        got = mpsim.round(x, fmt)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.shape == x.shape
        # torch's float8_e4m3fn cast saturates (±inf and overflow to ±448): mpsim's overflow="saturate".
        kw = {"overflow": "saturate"} if fmt == "fp8_e4m3" else {}
        got = mpsim.round(x, fmt, **kw)
        want = x.to(dtype).float()
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        print(f"{fmt}: {x.numel()} float32 values, {int((~same).sum())} differ from x.to({dtype}).float()")
        assert bool(same.all())
        bits = mpsim.encode(x, fmt, **kw)
        assert isinstance(bits, torch.Tensor)
        want_bits = x.to(dtype).view(torch.uint16 if dtype in (torch.float16, torch.bfloat16) else torch.uint8)
        nan = torch.isnan(want)
        assert torch.equal(bits[~nan], want_bits[~nan])


def test_tensor_in_place_views_and_grad():
    x = sample().reshape(2, -1)
    y = x.clone()
    r = mpsim.round(y, "bf16", out=y)
    assert r is y and torch.equal(y, x.to(torch.bfloat16).float())
    t = x.t()  # a strided view: copied to a contiguous tensor first
    assert torch.equal(mpsim.round(t, "fp16"), t.contiguous().half().float())
    w = x.clone().requires_grad_(True)
    assert torch.equal(mpsim.round(w, "fp16"), x.half().float())
    hw, hs = mpsim.Histogram(), mpsim.Histogram()
    hw.add(w)       # requires grad: detached
    hs.add(t)       # strided: made contiguous
    assert hw == hs
    h = mpsim.Histogram()
    h.add(x)
    hn = mpsim.Histogram()
    hn.add(x.numpy())
    assert h == hn and h.total == x.numel()
    c = mpsim.UnderflowCounter("fp16")
    c.add(x)
    counts = torch.from_numpy(c.counts_array())
    assert mpsim.UnderflowCounter.from_counts_array("fp16", "rne", counts, c.amax, c.amin_nonzero,
                                                    min=c.moments()["min"], max=c.moments()["max"]) == c
    assert mpsim.Histogram.from_counts_array(torch.from_numpy(h.counts_array())) == h


def test_tensor_bad_input():
    meta = torch.empty(8, device="meta")  # a tensor that is not in CPU memory, as a CUDA one
    for call in [lambda: mpsim.round(meta, "fp16"), lambda: mpsim.round(torch.ones(8, dtype=torch.complex64), "fp16"),
                 lambda: mpsim.round(torch.ones(8, dtype=torch.int32), "fp16")]:
        with pytest.raises(TypeError) as info:
            call()
        print("TypeError:", info.value)
    with pytest.raises(ValueError):
        mpsim.round(torch.ones(8), "fp16", out=torch.ones(16)[::2])
    with pytest.raises(TypeError):
        mpsim.Histogram().add(meta)
    with pytest.raises(TypeError):
        mpsim.UnderflowCounter("fp16").add(torch.ones(4, dtype=torch.int8))


def test_half_and_bfloat16_tensors():
    """float16 / bfloat16 tensors: rounded as their exact float32 values, returned in their own dtype."""
    x = sample()
    for dtype, fmt, low in [(torch.float16, "fp8_e5m2", torch.float8_e5m2), (torch.bfloat16, "fp8_e4m3", None),
                            (torch.bfloat16, "bf16", None)]:
        h = x.to(dtype)
        got = mpsim.round(h, fmt)
        assert got.dtype == dtype
        want = mpsim.round(h.float(), fmt).to(dtype)  # exact: every value of fmt is one of dtype
        nan = torch.isnan(want)  # torch's cast writes its own NaN pattern
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
        if low is not None:
            ref = h.to(low).to(dtype)
            nan = torch.isnan(ref)
            assert torch.equal(got[~nan], ref[~nan]) and bool(torch.isnan(got[nan]).all())
        y = h.clone()
        mpsim.round(y, fmt, out=y)
        assert torch.equal(y.view(torch.int16), got.view(torch.int16))
        c1, c2 = mpsim.UnderflowCounter("fp16"), mpsim.UnderflowCounter("fp16")
        c1.add(h)
        c2.add(h.float())
        assert c1 == c2
        print(f"{dtype} tensor to {fmt}: {h.numel()} values as rounding its float32 widening")
