"""mpsim.torch.emulate checked against PyTorch's own conversions (Tensor.half() / .bfloat16(), round to
nearest even) and autograd: a hooked Linear or Conv2d computes, forward and backward, what torch computes
from operands cast to the low format, accumulating in fp32 and casting the result; small gradients
underflow without loss scaling and do not with the real torch.amp.GradScaler."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mpsim
import mpsim.torch as mt

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def log_uniform(*shape, lo=-30, hi=6, seed=0):
    """Values whose magnitudes spread over 2^lo .. 2^hi with random signs: many land in fp16's subnormal
    and flushed ranges, so the rounding's edges are exercised, not only its normal range."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.empty(*shape).uniform_(lo, hi, generator=g))
    sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0)
    return mag * sign


def cast(t, fmt):
    """t rounded to fmt by torch itself (the independent reference), back in float32."""
    return t.to(TORCH_DTYPE[fmt]).float()


def compare(name, got, want):
    """Bit-for-bit comparison (NaN equal to NaN); prints what was compared."""
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    bad = int((~same).sum())
    worst = float((got - want).abs().nan_to_num(0).max()) if bad else 0.0
    print(f"{name}: {got.numel()} values compared, {bad} mismatches, worst |difference| {worst:g}")
    assert bad == 0, f"{name}: {bad} of {got.numel()} values differ"


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_linear_forward_and_backward_equal_torch_casts(fmt):
    torch.manual_seed(1)
    lin = nn.Linear(64, 48)
    with torch.no_grad():
        lin.weight.copy_(log_uniform(48, 64, lo=-12, hi=0, seed=2))
        lin.bias.copy_(log_uniform(48, lo=-20, hi=0, seed=3))
    x = log_uniform(32, 64, lo=-12, hi=4, seed=4).requires_grad_()
    g = log_uniform(32, 48, lo=-34, hi=-4, seed=5)  # gradients reaching the output: many flush in fp16

    emulation = mt.emulate(lin, fmt)
    y = lin(x)
    y.backward(g)
    emulation.remove()

    # The reference: operands cast by torch, fp32 products, the result cast (what autocast does to a Linear).
    x16, w16, b16 = cast(x.detach(), fmt), cast(lin.weight.detach(), fmt), cast(lin.bias.detach(), fmt)
    want_y = cast(F.linear(x16, w16, b16), fmt)
    g16 = cast(g, fmt)
    want_dx = cast(g16 @ w16, fmt)
    want_dw = cast(g16.t() @ x16, fmt)
    want_db = cast(g16.sum(0), fmt)
    compare(f"{fmt} Linear output", y.detach(), want_y)
    compare(f"{fmt} Linear input gradient", x.grad, want_dx)
    compare(f"{fmt} Linear weight gradient", lin.weight.grad, want_dw)
    compare(f"{fmt} Linear bias gradient", lin.bias.grad, want_db)
    flushed = int(((g != 0) & (g16 == 0)).sum())
    print(f"{fmt}: {flushed} of {g.numel()} output gradients flushed to zero by the cast")
    stats = emulation.stats()
    assert stats["Linear/out_grad"]["underflow"] == flushed
    assert stats["Linear/out_grad"]["count"] == g.numel()


def test_conv2d_forward_and_backward_equal_torch_casts():
    torch.manual_seed(2)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    x = log_uniform(2, 3, 10, 10, lo=-10, hi=2, seed=6).requires_grad_()
    g = log_uniform(2, 8, 10, 10, lo=-30, hi=-6, seed=7)
    with mt.emulate(conv, "fp16"):
        y = conv(x)
        y.backward(g)
    w16, b16, x16, g16 = (cast(t, "fp16") for t in (conv.weight.detach(), conv.bias.detach(), x.detach(), g))
    x_ref = x16.clone().requires_grad_()
    w_ref = w16.clone().requires_grad_()
    y_ref = F.conv2d(x_ref, w_ref, b16, padding=1)
    y_ref.backward(g16)
    compare("fp16 Conv2d output", y.detach(), cast(y_ref.detach(), "fp16"))
    compare("fp16 Conv2d input gradient", x.grad, cast(x_ref.grad, "fp16"))
    compare("fp16 Conv2d weight gradient", conv.weight.grad, cast(w_ref.grad, "fp16"))


def test_remove_restores_fp32():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(4, 8)
    plain = model(x)
    emulation = mt.emulate(model, "fp8_e4m3")
    emulated = model(x)
    emulation.remove()
    again = model(x)
    assert torch.equal(plain, again)
    assert not torch.equal(plain, emulated)  # e4m3's 3 significand bits change the outputs
    print(f"fp32 outputs restored after remove(): {again.numel()} values equal; under e4m3 "
          f"{int((plain != emulated).sum())} differed")


def test_stochastic_rounding_is_reproducible_unbiased_and_between_neighbours():
    x = log_uniform(20000, lo=-20, hi=4, seed=8)
    lin = nn.Linear(1, 1)  # the sites come from emulate(); RoundingSite is what the hooks call
    emulation = mt.emulate(lin, "fp16", mode="sr", seed=7)
    site = emulation.sites["Linear/in"]
    a, b = site(x), site(x)
    emulation.remove()
    again = mt.emulate(lin, "fp16", mode="sr", seed=7).sites["Linear/in"](x)
    assert torch.equal(a, again), "the same seed and call number must give the same bits"
    assert not torch.equal(a, b), "two calls must draw different random numbers"
    # Every result is one of x's two fp16 neighbours: representable, and less than one fp16 ulp away.
    assert torch.equal(cast(a, "fp16"), a)
    exp = torch.floor(torch.log2(x.abs())).clamp(min=-14)
    ulp = torch.exp2(exp - 10)
    assert bool(((a - x).abs() < ulp).all())
    # Unbiased: the mean error over many draws of one value is small against its ulp.
    v = torch.full((40000,), 1.0 + 2.0**-12)  # a quarter of the way from 1 to 1 + 2^-10
    r = site(v)
    up = float((r > 1).float().mean())
    print(f"sr: {x.numel()} values between their fp16 neighbours; P(round up) of 1+2^-12 = {up:.4f} (want 0.25)")
    assert abs(up - 0.25) < 0.01  # 40000 draws: the standard error is 0.0022


def splitmix64(x):
    """The seed derivation's mixer (Steele, Lea & Flood 2014), written again here on numpy uint64 (wrapping
    arithmetic) as the reference for the sites' per-call seeds."""
    with np.errstate(over="ignore"):
        x = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return int(x ^ (x >> np.uint64(31)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["rne", "sr"])
def test_site_equals_mpsim_round_bit_for_bit(mode, dtype):
    """A RoundingSite's call (options parsed once, numpy views, stats summed in C++) against the general path
    mpsim.round(x.contiguous(), seed=...) from a numpy copy and from the tensor: the same bits and the same
    summed stats, contiguous and strided input (a transposed view), a tensor that requires grad, call k
    seeded splitmix64(splitmix64(seed ^ splitmix64(index)) ^ k)."""
    seed, index = 12345, 3
    site = mt.RoundingSite("s", index, "fp16", mode, seed=seed, sr_bits=32, subnormals="keep", overflow="inf")
    xs = [log_uniform(48, 64, lo=-30, hi=18, seed=20).to(dtype),
          log_uniform(64, 48, lo=-30, hi=18, seed=21).to(dtype).t(),       # strided
          log_uniform(1000, lo=-20, hi=4, seed=22).to(dtype).requires_grad_(),
          torch.tensor([0.0, -0.0, float("nan"), float("inf"), 1e-30, 7e4], dtype=dtype)]
    want_totals, compared = {}, 0
    for k, x in enumerate(xs):
        call_seed = splitmix64(splitmix64(seed ^ splitmix64(index)) ^ k) if mode == "sr" else 0
        got = site(x)
        from_numpy, st = mpsim.round(x.detach().numpy().copy(), "fp16", mode, seed=call_seed, stats=True)
        from_tensor, st2 = mpsim.round(x, "fp16", mode, seed=call_seed, stats=True)
        assert st == st2
        assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous()
        bits = torch.int64 if dtype == torch.float64 else torch.int32  # compared as encodings: NaNs too
        for name, want in (("numpy", torch.from_numpy(from_numpy)), ("tensor", from_tensor)):
            compare(f"site {mode} {dtype} call {k} vs mpsim.round from {name}", got.view(bits), want.view(bits))
        compared += x.numel()
        for key, v in st.items():
            if key not in ("max_abs", "min_abs_nonzero", "flipped"):  # a site rounds without soft errors
                want_totals[key] = want_totals.get(key, 0) + v
    assert site.calls == len(xs)
    assert site.totals == want_totals, (site.totals, want_totals)
    site.reset()
    assert site.totals == {}
    print(f"site {mode} {dtype}: {compared} values in {len(xs)} calls bit for bit, totals {want_totals}")


def test_round_of_a_tensor_equals_the_dlpack_path():
    """mpsim.round hands _core numpy views of a torch tensor; the tensor itself through DLPack (the path it
    replaced, still taken where no view exists) gives the same bits and stats, and out= writes the tensor."""
    x = log_uniform(4096, lo=-30, hi=18, seed=23)
    for mode, seed in (("rne", 0), ("sr", 99)):
        got, st = mpsim.round(x, "bf16", mode, seed=seed, stats=True)
        want = torch.empty_like(x)
        want_st = mpsim._core.round_into(x, want, mpsim.Format("bf16"), mode, seed, 32, "keep", "inf", "ieee",
                                         False, True, 0, 0)
        compare(f"mpsim.round(tensor, bf16, {mode}) vs the DLPack call", got.view(torch.int32),
                want.view(torch.int32))
        assert st == want_st
        out = torch.zeros_like(x)
        assert mpsim.round(x, "bf16", mode, seed=seed, out=out) is out
        assert torch.equal(out.view(torch.int32), want.view(torch.int32))
    grad_out = torch.zeros_like(x).requires_grad_()  # no numpy view: written through DLPack, as before
    with torch.no_grad():  # outside no_grad mpsim refuses to write into it (RequiresGradError)
        mpsim.round(x, "bf16", mode, seed=seed, out=grad_out)
    assert torch.equal(grad_out.detach().view(torch.int32), want.view(torch.int32))
    print(f"mpsim.round(tensor): {x.numel()} values in rne and sr equal the DLPack call's, stats too")


def test_soft_errors_on_a_tensor_equal_those_on_its_numpy_copy():
    """flip= (soft errors) reaches the kernel from a torch tensor as from a numpy array: the same bits and the
    same flipped count, in place and allocating, for values and encodings."""
    x = log_uniform(4096, lo=-30, hi=18, seed=24)
    got, st = mpsim.round(x, "fp16", flip=0.25, flip_seed=7, stats=True)
    want, want_st = mpsim.round(x.numpy().copy(), "fp16", flip=0.25, flip_seed=7, stats=True)
    compare("mpsim.round(tensor, fp16, flip=0.25) vs numpy", got.view(torch.int32),
            torch.from_numpy(want).view(torch.int32))
    assert st == want_st and st["flipped"] > 0
    plain = mpsim.round(x, "fp16")
    assert not torch.equal(plain.view(torch.int32), got.view(torch.int32))
    bits = mpsim.encode(x, "fp16", flip=0.25, flip_seed=7)
    assert np.array_equal(np.asarray(bits), mpsim.encode(x.numpy().copy(), "fp16", flip=0.25, flip_seed=7))
    print(f"soft errors on a tensor: {x.numel()} values, {st['flipped']} flipped, as on its numpy copy")


def test_stochastic_emulation_through_a_linear():
    """mode="sr" through the hooks, forward and backward: every value fp16-representable, a fresh draw per
    call, the whole run repeated bit for bit from the same seed."""
    def run(seed):
        torch.manual_seed(5)
        lin = nn.Linear(16, 8)
        x = log_uniform(4, 16, lo=-12, hi=2, seed=9).requires_grad_()
        with mt.emulate(lin, "fp16", mode="sr", seed=seed):
            y1, y2 = lin(x), lin(x)
            (y1.sum() * 2.0**-20).backward()
        return y1.detach(), y2.detach(), x.grad.clone(), lin.weight.grad.clone()

    a, b = run(3), run(3)
    c = run(4)
    for name, t in zip(("output", "second output", "input gradient", "weight gradient"), a):
        assert torch.equal(cast(t, "fp16"), t), name
    assert all(torch.equal(u, v) for u, v in zip(a, b)), "the same seed repeats the run"
    assert not torch.equal(a[0], a[1]), "two forward calls draw different random numbers"
    assert not torch.equal(a[0], c[0]), "another seed draws other numbers"
    print(f"sr emulation: {sum(t.numel() for t in a)} values fp16-representable; seed 3 repeated bit for bit, "
          f"{int((a[0] != a[1]).sum())} of {a[0].numel()} outputs differ between two calls")


def small_gradient_run(scaler, steps=3):
    """A two-layer model whose loss is 2^-22 times an ordinary one: its activation gradients lie below
    fp16's subnormal range unless a loss scale lifts them. Returns, per step, the fraction of the
    non-zero gradients reaching the last Linear's output (from the fp32 loss, not yet rounded) that fp16
    flushes, from the monitor and from torch's own cast of the same values (captured with a plain tensor
    hook), and the emulation's count at that site. (Upstream sites see zeros where these flushed.)"""
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    emulation = mt.emulate(model, "fp16")
    monitor = mt.GradientMonitor(model, formats=["fp16"], every=1, scaler=scaler, emulation=emulation)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    captured = []

    def capture(module, inputs, output):
        output.register_hook(lambda g: captured.append(g.clone()))

    model[2].register_forward_hook(capture)
    rows = []
    for _ in range(steps):
        captured.clear()
        x, y = torch.randn(64, 16), torch.randn(64, 4)
        loss = F.mse_loss(model(x), y) * 2.0**-22
        (scaler.scale(loss) if scaler else loss).backward()
        report = monitor.step(loss)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad()
        g = captured[0]
        nz = g != 0
        torch_flushed = float(((g.half() == 0) & nz).sum()) / max(int(nz.sum()), 1)
        rows.append((report["formats"]["fp16"]["activation_grad"]["sites"]["2/out_grad"]["zero"], torch_flushed,
                     report["loss_scale"]))
    # The monitor counted every backward rounding site before the rounding, on every step: its underflow
    # counts (mpsim.UnderflowCounter) equal what the roundings themselves reported (mpsim.round's stats).
    sites = [s for s in emulation.sites if s.endswith(("/out_grad", "/in_grad")) and emulation.sites[s].calls]
    for site in sites:
        counted = monitor.totals["activation_grad"][site].counters["fp16"].underflow(0)
        rounded = emulation.stats()[site]
        assert (counted["underflows_num"], counted["subnormals_num"], counted["numel"]) == \
            (rounded["underflow"], rounded["subnormal"], rounded["count"]), site
    print(f"monitor and emulation agree at {sites}: underflow "
          f"{[emulation.stats()[s]['underflow'] for s in sites]} of {[emulation.stats()[s]['count'] for s in sites]}")
    stats = emulation.stats()["2/out_grad"]
    emulation.remove()
    monitor.close()
    return rows, stats


def test_underflow_without_scaling_disappears_with_gradscaler():
    plain, plain_stats = small_gradient_run(None)
    scaled, scaled_stats = small_gradient_run(torch.amp.GradScaler("cpu", init_scale=2.0**16))
    for name, rows in (("no scaling", plain), ("GradScaler 2^16", scaled)):
        for monitor_frac, torch_frac, scale in rows:
            print(f"{name}: loss scale {scale:g}: monitor says {100 * monitor_frac:.2f}% of 2/out_grad flushed "
                  f"by fp16, torch's cast of the same values {100 * torch_frac:.2f}%")
            assert monitor_frac == pytest.approx(torch_frac, abs=1e-12)
    print(f"emulation at 2/out_grad: no scaling {plain_stats['underflow']} of {plain_stats['count']} flushed; "
          f"GradScaler {scaled_stats['underflow']} of {scaled_stats['count']}")
    assert min(r[0] for r in plain) > 0.5
    assert max(r[0] for r in scaled) == 0
    assert plain_stats["underflow"] > 0.5 * plain_stats["count"] and scaled_stats["underflow"] == 0


def test_bad_input_names_the_tensor():
    lin = nn.Linear(4, 4).to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"Linear\.weight.*bfloat16"):
        mt.emulate(lin, "fp16")
    with pytest.raises(ValueError, match="has no module"):
        mt.emulate(nn.ReLU(), "fp16")
    with pytest.raises(Exception, match="fp99"):
        mt.emulate(nn.Linear(2, 2), "fp99")
    lin = nn.Linear(4, 4)
    with mt.emulate(lin, "fp16"):
        with pytest.raises(ValueError, match=r"Linear/in: a tensor on meta"):
            lin(torch.empty(2, 4, device="meta"))
        with pytest.raises(TypeError, match=r"Linear/in: dtype torch.float16"):
            lin(torch.ones(2, 4, dtype=torch.float16))
        with pytest.raises(ValueError, match="already emulated"):
            mt.emulate(lin, "bf16")
    assert mpsim.Format("fp16").name == "fp16"
