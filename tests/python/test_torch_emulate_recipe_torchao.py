"""emulate(model, recipe=...) against torchao 0.18's own float8 training on the CPU
(torchao.float8.convert_to_float8_training), on a small MLP and on one Linear (docs/torch.md#recipes):

  * tensorwise with power-of-two scales (Float8LinearConfig(round_scales_to_power_of_2=True)) against
    fp8-tensorwise-current:power_2_scales=1: output, loss and every gradient bit for bit;
  * tensorwise with torchao's default scales (fp8_max / amax, not powers of two) against fp8-tensorwise-current:
    torch's CPU torch._scaled_mm applies a non-power-of-two scale pair in a way none of q·s^-1 products,
    (sum)·(s_a^-1 s_b^-1) or (sum)·s_a^-1·s_b^-1 reproduces, while with scales of 1 or powers of two it equals
    torch.mm of the fp8 values times the scales exactly (test_scaled_mm_on_the_cpu): the worst difference is
    printed and bounded;
  * rowwise (Float8LinearConfig.from_recipe_name("rowwise")) against fp8-rowwise: torchao runs a rowwise GEMM with
    an fp32 model through a bfloat16 output (torchao/float8/float8_ops.py, addmm_float8_unwrapped: "work around
    torch._scaled_mm not having float32 output type"), the power-of-two row scales applied to that bfloat16
    result; so each GEMM of one Linear (output, dgrad, wgrad, fed the same output gradient) equals mpsim's fp32
    result rounded to bfloat16, bit for bit, and the MLP's gradients differ by what those roundings propagate.
Skipped without torchao."""
import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")
from torch import nn  # noqa: E402
from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

import mpsim.torch as mt  # noqa: E402


def data(seed, shape, lo=-6, hi=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * torch.exp2(torch.empty(*shape).uniform_(lo, hi, generator=g))


def mlp():
    torch.manual_seed(3)  # torchao needs dimensions divisible by 16
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))


def bits_differ(a, b):
    return int((a.detach().contiguous().view(torch.int32) != b.detach().contiguous().view(torch.int32)).sum())


def ulps(a, b):
    return int((a.detach().view(torch.int32).long() - b.detach().view(torch.int32).long()).abs().max())


def run_both(model, config, spec, x, t):
    ao = convert_to_float8_training(copy.deepcopy(model), config=config)
    ours = copy.deepcopy(model)
    mt.emulate(ours, recipe=spec)
    out = []
    for m in (ao, ours):
        y = m(x)
        loss = nn.functional.mse_loss(y, t)
        loss.backward()
        out.append((y, loss, {n: p.grad for n, p in m.named_parameters()}))
    return out


def test_tensorwise_power_of_two_scales_bit_for_bit():
    x, t = data(1, (32, 64)), data(2, (32, 32), 0, 1)
    (ya, la, ga), (yb, lb, gb) = run_both(mlp(), Float8LinearConfig(round_scales_to_power_of_2=True),
                                          "fp8-tensorwise-current:power_2_scales=1", x, t)
    differ = {n: bits_differ(ga[n], gb[n]) for n in ga}
    print(f"tensorwise pow2 vs torchao: output {yb.numel()} values, {bits_differ(ya, yb)} differ; loss {la.item():.9g} "
          f"vs {lb.item():.9g}; gradients differ {differ} of {[g.numel() for g in gb.values()]}")
    assert bits_differ(ya, yb) == 0 and bits_differ(la, lb) == 0 and not any(differ.values())


def test_tensorwise_default_scales_within_scaled_mm_difference():
    x, t = data(1, (32, 64)), data(2, (32, 32), 0, 1)
    (ya, la, ga), (yb, lb, gb) = run_both(mlp(), Float8LinearConfig(), "fp8-tensorwise-current", x, t)
    rel = {n: float(((ga[n] - gb[n]).abs().max() / ga[n].abs().max())) for n in ga}
    y_rel = float((ya - yb).detach().abs().max() / ya.detach().abs().max())
    print(f"tensorwise (fp8_max / amax scales) vs torchao: output {bits_differ(ya, yb)} of {ya.numel()} differ, worst "
          f"{ulps(ya, yb)} ulps, {y_rel:.3g} of the largest; loss {la.item():.9g} vs {lb.item():.9g}; gradients' "
          f"worst difference relative to their largest {rel}")
    # torch._scaled_mm's scale application on the CPU is last-bits away from an fp32 product of the same values
    # (test_scaled_mm_on_the_cpu); an fp8 rounding decision flipped by that would show as 2^-4 relative (e4m3).
    assert y_rel < 1e-4 and all(r < 1e-3 for r in rel.values()) and abs(la.item() - lb.item()) < 1e-5 * la.item()


def test_rowwise_linear_equals_torchao_through_bfloat16():
    torch.manual_seed(4)
    lin = nn.Linear(64, 48)
    x, g = data(5, (32, 64)), data(6, (32, 48), -10, -4)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ao = convert_to_float8_training(nn.Sequential(copy.deepcopy(lin)),
                                    config=Float8LinearConfig.from_recipe_name("rowwise"))
    ours = nn.Sequential(copy.deepcopy(lin))
    mt.emulate(ours, recipe="fp8-rowwise")
    ya, yb = ao(xa), ours(xb)
    ya.backward(g)
    yb.backward(g)
    bias = lin.bias.detach()

    def bf16(v):
        return v.bfloat16().float()

    # torchao adds the bias in fp32 after its bfloat16 GEMM output (float8_linear.py: output + self.bias).
    checks = {"output": (ya, bf16(yb - bias) + bias), "dgrad": (xa.grad, bf16(xb.grad)),
              "wgrad": (ao[0].weight.grad, bf16(ours[0].weight.grad)), "bias grad": (ao[0].bias.grad, ours[0].bias.grad)}
    differ = {k: bits_differ(a, b) for k, (a, b) in checks.items()}
    print(f"rowwise Linear vs torchao, mpsim's fp32 GEMM outputs rounded to bfloat16: {differ} differ of "
          f"{ {k: a.numel() for k, (a, _) in checks.items()} }")
    assert not any(differ.values())
    # and mpsim keeps them fp32: they are not all bfloat16 values already
    assert bits_differ(yb.detach(), bf16(yb.detach())) > 0


def test_rowwise_mlp_equals_the_recipe_with_bfloat16_outputs():
    """The MLP under torchao's rowwise against the hand-written GEMMs of test_torch_emulate_recipe.py (mpsim.Recipe's
    operands) with each GEMM's fp32 result rounded to bfloat16, as torchao computes it: bit for bit. emulate()
    itself keeps those results fp32 (the recipe's definition, TE's and the simulator's): the figures printed."""
    from test_torch_emulate_recipe import reference
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    x, t = data(1, (32, 64)), data(2, (32, 32), 0, 1)
    (ya, la, ga), (yb, lb, gb) = run_both(model, Float8LinearConfig.from_recipe_name("rowwise"), "fp8-rowwise", x, t)
    want_y, want_g, _ = reference("fp8-rowwise", copy.deepcopy(model), x, t, gemm_out=lambda v: v.bfloat16().float())
    differ = {n: bits_differ(ga[n], want_g[n]) for n in ga}
    rel = {n: round(float(((ga[n] - gb[n]).abs().max() / ga[n].abs().max())), 5) for n in ga}
    print(f"rowwise MLP: torchao vs the recipe's GEMMs with bfloat16 outputs: output {bits_differ(ya, want_y)} of "
          f"{ya.numel()} differ, gradients {differ}; torchao vs emulate() (fp32 outputs): output "
          f"{bits_differ(ya, yb)} differ, loss {la.item():.9g} vs {lb.item():.9g}, gradients' worst difference "
          f"relative to their largest {rel}")
    assert bits_differ(ya, want_y) == 0 and not any(differ.values())


def test_scaled_mm_on_the_cpu():
    """What torchao's GEMM is on the CPU: torch._scaled_mm of e4m3 operands with scales of 1 and powers of two
    equals torch.mm of their float32 values, scaled, bit for bit; with fp8_max / amax scales the three natural
    formulas are printed with how far they are (none is asserted: the kernel's rounding is torch's choice)."""
    a, b = data(7, (16, 64), -2, 2), data(8, (24, 64), -2, 2)
    sa, sb = 448 / a.abs().max(), 448 / b.abs().max()
    qa, qb = (a * sa).to(torch.float8_e4m3fn), (b * sb).to(torch.float8_e4m3fn)
    raw = torch.mm(qa.float(), qb.float().t())
    one = torch.ones(())
    pa, pb = torch.tensor(2.0 ** -5), torch.tensor(2.0 ** -3)
    unit = torch._scaled_mm(qa, qb.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
    pow2 = torch._scaled_mm(qa, qb.t(), scale_a=pa, scale_b=pb, out_dtype=torch.float32)
    ia, ib = sa.reciprocal(), sb.reciprocal()
    got = torch._scaled_mm(qa, qb.t(), scale_a=ia, scale_b=ib, out_dtype=torch.float32)
    formulas = {"mm of q*s^-1": torch.mm(qa.float() * ia, (qb.float() * ib).t()), "mm*(ia*ib)": raw * (ia * ib),
                "mm*ia*ib": raw * ia * ib}
    far = {k: (bits_differ(got, v), ulps(got, v)) for k, v in formulas.items()}
    print(f"_scaled_mm on the CPU, {raw.numel()} outputs: scales 1 vs mm {bits_differ(unit, raw)} differ; powers of "
          f"two vs mm*pa*pb {bits_differ(pow2, raw * pa * pb)} differ; fp8_max / amax scales (differing, worst ulps): "
          f"{far}")
    assert bits_differ(unit, raw) == 0 and bits_differ(pow2, raw * pa * pb) == 0
