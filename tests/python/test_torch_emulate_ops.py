"""mpsim.torch.emulate at the operation level: every product a model's forward computes, a transformer's
included, rounded where autocast casts, checked three ways:

  * bit for bit against a hand-written unroll of nn.TransformerEncoderLayer (self-attention, the MLP, the
    layer norms) in plain torch operations with torch's own casts (Tensor.to(float16 / bfloat16), round to
    nearest even) at the documented sites, forward and backward (a custom autograd function casts the value
    forward and its gradient backward, independently of mpsim): output, input gradient, every parameter's
    gradient, and every site's call and value counts;
  * the two traps of the module-hook emulation, each failing on it: MultiheadAttention's in-projection,
    attention products and out_proj never rounded (out_proj's sites made but never called), and eval mode
    under no_grad taking torch's fused _transformer_encoder_layer_fwd past every submodule (the output was
    fp32's bit for bit);
  * against torch's own CPU autocast where its op lists coincide (Linear, Conv2d, an MLP: the same bits)
    and where they do not (a transformer layer: autocast runs the residual stream and layer norm in fp16 and
    attention in a fused kernel), the difference measured and printed.
Plus: a hand-written attention equals F.scaled_dot_product_attention under emulate() bit for bit, RNN and
einsum are named in a NotEmulatedWarning, module_types, the monitor counting at sites made during a forward.
"""
import math
import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_main import require_torch  # noqa: E402

torch = require_torch(__name__)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import mpsim.torch as mt  # noqa: E402

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def compare(name, got, want):
    """Bit-for-bit comparison (NaN equal to NaN); prints what was compared."""
    got, want = got.detach(), want.detach()
    assert got.shape == want.shape, (name, got.shape, want.shape)
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    bad = int((~same).sum())
    worst = float((got - want).abs().nan_to_num(0).max()) if bad else 0.0
    print(f"{name}: {got.numel()} values compared, {bad} mismatches, worst |difference| {worst:g}")
    assert bad == 0, f"{name}: {bad} of {got.numel()} values differ (worst {worst:g})"


class Cast(torch.autograd.Function):
    """The reference rounding: torch's cast to the low dtype and back, forward; the gradient cast the same way
    in backward (what an autocast cast and the fp16 GEMM behind it do to a gradient)."""

    @staticmethod
    def forward(ctx, x, dtype, forward, backward):
        ctx.dtype, ctx.backward_cast = dtype, backward
        return x.to(dtype).to(x.dtype) if forward else x.clone()

    @staticmethod
    def backward(ctx, g):
        return (g.to(ctx.dtype).to(g.dtype) if ctx.backward_cast else g), None, None, None


def make_counter():
    """c(x, site): Cast at site SITE, recording each call's site and value count (forward and backward)."""
    calls = {}

    def count(site, n):
        c = calls.setdefault(site, [0, 0])
        c[0] += 1
        c[1] += n

    class Counted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dtype, fwd, bwd):
            ctx.dtype, ctx.bwd = dtype, bwd
            if fwd:
                count(fwd, x.numel())
                return x.to(dtype).to(x.dtype)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            if ctx.bwd:
                count(ctx.bwd, g.numel())
                return g.to(ctx.dtype).to(g.dtype), None, None, None
            return g, None, None, None

    return calls, Counted.apply


def reference_linear(c, dtype, prefix, x, w, b):
    """A product with a weight: input, weight and bias cast, fp32 F.linear, output cast; their gradients cast."""
    xin = c(x, dtype, f"{prefix}/in", f"{prefix}/in_grad")
    wr = c(w, dtype, f"{prefix}/weight", f"{prefix}/w_grad")
    br = c(b, dtype, f"{prefix}/weight", f"{prefix}/w_grad")
    return c(F.linear(xin, wr, br), dtype, f"{prefix}/out", f"{prefix}/out_grad")


def reference_attention(c, dtype, prefix, q, k, v, causal=False):
    """The documented attention sites: q * scale cast, k cast, scores cast, softmax in fp32, probs cast, v
    cast, out cast; every gradient cast where it passes one of them."""
    scale = 1.0 / math.sqrt(q.size(-1))
    qr = c(q * scale, dtype, f"{prefix}/q", f"{prefix}/q_grad")
    kr = c(k, dtype, f"{prefix}/k", f"{prefix}/k_grad")
    s = c(torch.matmul(qr, kr.transpose(-2, -1)), dtype, f"{prefix}/scores", f"{prefix}/scores_grad")
    if causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        s = s.masked_fill(keep.logical_not(), float("-inf"))
    p = c(torch.softmax(s, dim=-1), dtype, f"{prefix}/probs", f"{prefix}/probs_grad")
    vr = c(v, dtype, f"{prefix}/v", f"{prefix}/v_grad")
    return c(torch.matmul(p, vr), dtype, f"{prefix}/out", f"{prefix}/out_grad")


def reference_encoder_layer(layer, x, fmt, c):
    """nn.TransformerEncoderLayer (batch_first, post-norm, ReLU, no dropout) written out as its slow path
    computes it (torch/nn/modules/transformer.py, F.multi_head_attention_forward), casts at the sites."""
    dtype = TORCH_DTYPE[fmt]
    attn = layer.self_attn
    B, T, E = x.shape
    H = attn.num_heads
    xt = x.transpose(0, 1)  # MultiheadAttention works time-major
    proj = reference_linear(c, dtype, "self_attn/in_proj", xt, attn.in_proj_weight, attn.in_proj_bias)
    proj = proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    q, k, v = (t.view(T, B * H, E // H).transpose(0, 1).view(B, H, T, E // H) for t in (proj[0], proj[1], proj[2]))
    a = reference_attention(c, dtype, "self_attn/sdpa", q, k, v)
    a = a.permute(2, 0, 1, 3).contiguous().view(B * T, E)
    a = reference_linear(c, dtype, "self_attn.out_proj", a, attn.out_proj.weight, attn.out_proj.bias)
    a = a.view(T, B, E).transpose(0, 1)
    h = layer.norm1(x + a)
    f = reference_linear(c, dtype, "linear1", h, layer.linear1.weight, layer.linear1.bias)
    f = reference_linear(c, dtype, "linear2", torch.relu(f), layer.linear2.weight, layer.linear2.bias)
    return layer.norm2(h + f)


def encoder_layer():
    torch.manual_seed(7)
    return nn.TransformerEncoderLayer(16, 2, 48, dropout=0.0, batch_first=True)


def run_and_grads(layer, x, forward, g):
    for p in layer.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_()
    y = forward(x)
    y.backward(g)
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_transformer_layer_equals_a_hand_written_unroll(fmt):
    layer = encoder_layer()
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, 5, 16, generator=gen)
    g = torch.randn(3, 5, 16, generator=gen) * 2.0**-12  # small gradients: some reach fp16's subnormals
    calls, c = make_counter()
    want_y, want_dx, want_grads = run_and_grads(layer, x, lambda t: reference_encoder_layer(layer, t, fmt, c), g)
    with mt.emulate(layer, fmt) as emulation:
        got_y, got_dx, got_grads = run_and_grads(layer, x, layer, g)
        stats = emulation.stats()
    compare(f"{fmt} TransformerEncoderLayer output", got_y, want_y)
    compare(f"{fmt} input gradient", got_dx, want_dx)
    for name in want_grads:
        compare(f"{fmt} {name} gradient", got_grads[name], want_grads[name])
    plain_y = layer(x)
    assert not torch.equal(plain_y, got_y)
    # Every site the unroll casts at, with as many calls and values; no other site rounded anything.
    got_calls = {n: (emulation.sites[n].calls, st.get("count", 0)) for n, st in stats.items() if st}
    want_calls = {n: tuple(v) for n, v in calls.items()}
    assert got_calls == want_calls, sorted(set(got_calls.items()) ^ set(want_calls.items()))
    print(f"{fmt}: {len(want_calls)} sites, {sum(v[0] for v in want_calls.values())} roundings of "
          f"{sum(v[1] for v in want_calls.values())} values, as the unroll's; output differs from fp32 in "
          f"{int((plain_y != got_y).sum())} of {got_y.numel()} values")


def test_every_site_of_a_transformer_layer_is_called():
    """Trap 1 of the module-hook emulation: the in-projection and the attention products are not modules
    (never rounded) and out_proj's sites were made but never called (MultiheadAttention uses its weight)."""
    layer = encoder_layer()
    with mt.emulate(layer, "fp16") as emulation:
        layer(torch.randn(2, 4, 16, requires_grad=True)).sum().backward()
        never = sorted(n for n, s in emulation.sites.items() if s.calls == 0)
        names = sorted(emulation.sites)
    print(f"{len(names)} sites: {names}; never called: {never}")
    assert never == []
    for prefix in ("self_attn/in_proj", "self_attn/sdpa", "self_attn.out_proj", "linear1", "linear2"):
        assert any(n.startswith(prefix + "/") for n in names), prefix


def test_eval_no_grad_fast_path_is_emulated():
    """Trap 2: in eval mode under no_grad, TransformerEncoderLayer took torch's fused
    _transformer_encoder_layer_fwd, past every submodule; the emulated layer's output was fp32's. With the
    emulation's mode on, the layer sees has_torch_function() and takes its composite path: the output equals
    the unroll's bit for bit."""
    layer = encoder_layer().eval()
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(9))
    _, c = make_counter()
    with torch.no_grad():
        plain = layer(x)
        want = reference_encoder_layer(layer, x, "fp16", c)
        with mt.emulate(layer, "fp16") as emulation:
            got = layer(x)
            calls = {n: s.calls for n, s in emulation.sites.items()}
    compare("eval, no_grad: emulated fp16 layer vs the unroll", got, want)
    differ = int((got != plain).sum())
    print(f"eval, no_grad: {differ} of {got.numel()} outputs differ from fp32; site calls {calls}")
    assert differ > 0 and all(calls[n] > 0 for n in calls if not n.endswith("grad"))


class HandAttention(nn.Module):
    """Attention written with matmul and softmax, as many models write it."""

    def forward(self, q, k, v):
        s = (q * (1.0 / math.sqrt(q.size(-1)))) @ k.transpose(-2, -1)
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        return torch.softmax(s.masked_fill(keep.logical_not(), float("-inf")), dim=-1) @ v


class SdpaAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Holder(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.attention = attention

    def forward(self, q, k, v):
        return self.attention(self.proj(q), k, v)


def test_hand_written_attention_equals_sdpa_and_the_unroll():
    gen = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=gen) for _ in range(3))
    g = torch.randn(2, 3, 6, 8, generator=gen)
    results = {}
    for name, attention in (("matmul", HandAttention()), ("sdpa", SdpaAttention())):
        torch.manual_seed(11)
        model = Holder(attention)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with mt.emulate(model, "fp16") as emulation:
            y = model(*leaves)
            y.backward(g)
            results[name] = [y.detach()] + [t.grad for t in leaves] + [model.proj.weight.grad]
            sites = sorted(n for n, s in emulation.sites.items() if s.calls)
        print(f"{name}: sites {sites}")
    for i, what in enumerate(("output", "q gradient", "k gradient", "v gradient", "proj weight gradient")):
        compare(f"hand-written attention vs F.scaled_dot_product_attention, {what}", results["matmul"][i],
                results["sdpa"][i])
    # and the sdpa against the documented casts
    torch.manual_seed(11)
    model = Holder(SdpaAttention())
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    _, c = make_counter()
    y = reference_attention(c, torch.float16, "sdpa", reference_linear(
        c, torch.float16, "proj", leaves[0], model.proj.weight, model.proj.bias), leaves[1], leaves[2], causal=True)
    y.backward(g)
    for i, (what, t) in enumerate(zip(("output", "q gradient", "k gradient", "v gradient"), [y] + leaves)):
        compare(f"emulated sdpa vs the unroll, {what}", results["sdpa"][i], t if i == 0 else t.grad)


def autocast_run(model, x, g, fmt):
    x = x.clone().requires_grad_()
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=TORCH_DTYPE[fmt]):
        y = model(x)
    y.float().backward(g)
    return [y.detach().float(), x.grad] + [p.grad.clone() for p in model.parameters()]


def emulated_run(model, x, g, fmt):
    x = x.clone().requires_grad_()
    for p in model.parameters():
        p.grad = None
    with mt.emulate(model, fmt):
        y = model(x)
        y.backward(g)
    return [y.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def low_ulps(got, want, fmt):
    """max |got - want| in ulps of fmt at the tensor's largest magnitude."""
    got, want = got.detach(), want.detach()
    m = float(want.abs().max())
    man = 10 if fmt == "fp16" else 7
    return float((got - want).abs().max()) / (2.0 ** (math.floor(math.log2(m)) - man)) if m > 0 else 0.0


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_against_torch_cpu_autocast(fmt):
    """Where autocast's CPU op lists and emulate() round at the same places, the same bits: an MLP and a CNN
    (Linear, Conv2d, ReLU between them: autocast runs ReLU in the low dtype, which changes no value) forward
    and backward; a hand-written attention (matmul, softmax, matmul) forward: autocast rounds the scores and
    probabilities as fp16 tensors where emulate() rounds them at its scores / probs sites. Where they do not
    coincide, the difference is measured: F.scaled_dot_product_attention under CPU autocast runs a fused
    flash-attention kernel (scores never rounded, the softmax online over blocks), within 1 ulp of the low
    format at the output's largest value here; the hand-written attention's backward, where autocast's
    softmax backward reads the rounded probabilities (emulate()'s reads fp32's), printed."""
    gen = torch.Generator().manual_seed(12)
    torch.manual_seed(13)
    mlp = nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 10))
    x, g = torch.randn(16, 24, generator=gen), torch.randn(16, 10, generator=gen) * 2.0**-8
    for what, got, want in zip(("output", "input gradient", "w1", "b1", "w2", "b2"),
                               emulated_run(mlp, x, g, fmt), autocast_run(mlp, x, g, fmt)):
        compare(f"{fmt} MLP {what}: emulate() vs torch.autocast('cpu')", got, want)
    conv = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 4, 3))
    x, g = torch.randn(2, 3, 9, 9, generator=gen), torch.randn(2, 4, 7, 7, generator=gen) * 2.0**-8
    for what, got, want in zip(("output", "input gradient", "w1", "b1", "w2", "b2"),
                               emulated_run(conv, x, g, fmt), autocast_run(conv, x, g, fmt)):
        compare(f"{fmt} CNN {what}: emulate() vs torch.autocast('cpu')", got, want)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=gen) for _ in range(3))
    g = torch.randn(2, 3, 6, 8, generator=gen)
    for name, attention in (("hand-written attention", HandAttention()), ("sdpa", SdpaAttention())):
        torch.manual_seed(11)
        model = Holder(attention)
        runs = []
        for autocast in (False, True):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            for p in model.parameters():
                p.grad = None
            if autocast:
                with torch.autocast("cpu", dtype=TORCH_DTYPE[fmt]):
                    y = model(*leaves)
                y.float().backward(g)
            else:
                with mt.emulate(model, fmt):
                    y = model(*leaves)
                    y.backward(g)
            runs.append([y.detach().float()] + [t.grad for t in leaves])
        (emu, *emu_grads), (auto, *auto_grads) = runs
        if name == "sdpa":
            ulps = low_ulps(emu, auto, fmt)
            print(f"{fmt} {name}: emulate() vs autocast's fused kernel: {int((emu != auto).sum())} of {emu.numel()} "
                  f"outputs differ, at most {ulps:.2f} ulps of {fmt} at the largest output")
            assert ulps <= 1.0
        else:
            compare(f"{fmt} {name} output: emulate() vs torch.autocast('cpu')", emu, auto)
        diffs = [(int((a != b).sum()), round(low_ulps(a, b, fmt), 2)) for a, b in zip(emu_grads, auto_grads)]
        print(f"{fmt} {name} q, k, v gradients: (values differing, ulps at the largest) {diffs}")


def test_not_emulated_products_are_named():
    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return torch.einsum("bi,ij->bj", x, self.w)

    model = nn.ModuleDict({"rnn": nn.RNN(4, 4), "mix": Mixer(), "fc": nn.Linear(4, 4)})
    with pytest.warns(mt.NotEmulatedWarning, match=r"rnn \(RNN\)"):
        emulation = mt.emulate(model, "fp16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model["rnn"](torch.randn(3, 2, 4))
        model["mix"](torch.randn(2, 4))
        model["mix"](torch.randn(2, 4))
        model["fc"](torch.randn(2, 4))
    messages = [str(w.message) for w in caught if issubclass(w.category, mt.NotEmulatedWarning)]
    print(f"warnings while running: {messages}")
    assert len(messages) == 1 and "mix (Mixer) calls torch einsum" in messages[0]
    emulation.remove()


def test_module_types_limits_the_emulation():
    layer = encoder_layer()
    with mt.emulate(layer, "fp16", module_types=(nn.Linear,)) as emulation:
        layer(torch.randn(2, 4, 16)).sum().backward()
        called = sorted(n for n, s in emulation.sites.items() if s.calls)
    print(f"module_types=(nn.Linear,): sites called {called}")
    assert called and all(n.split("/")[0] in ("self_attn.out_proj", "linear1", "linear2") for n in called)


def test_monitor_counts_sites_made_during_a_forward():
    """A GradientMonitor attached before the first forward counts the attention's gradient sites, which the
    emulation makes during that forward, as the rounding reports them."""
    layer = encoder_layer()
    emulation = mt.emulate(layer, "fp16")
    monitor = mt.GradientMonitor(layer, formats=["fp16"], every=1, emulation=emulation)
    for _ in range(2):
        # A loss linear in the output (the square of a layer norm's output has a constant sum: no gradient),
        # scaled to put the gradients at fp16's subnormals.
        (layer(torch.randn(2, 4, 16)) * torch.randn(2, 4, 16)).mean().mul(2.0**-12).backward()
        monitor.step()
    rows = []
    for site in ("self_attn/sdpa/scores_grad", "self_attn/sdpa/q_grad", "self_attn/in_proj/out_grad",
                 "linear1/in_grad"):
        counted = monitor.totals["activation_grad"][site].counters["fp16"].underflow(0)
        rounded = emulation.stats()[site]
        rows.append((site, counted["numel"], counted["underflows_num"], counted["subnormals_num"]))
        assert (counted["numel"], counted["underflows_num"], counted["subnormals_num"]) == \
            (rounded["count"], rounded["underflow"], rounded["subnormal"]), site
    print("monitor and emulation agree (site, values, underflow, subnormal): " + "; ".join(map(str, rows)))
    assert any(r[2] or r[3] for r in rows)
    monitor.close()
    left = [n for n, s in emulation.sites.items() if s.observers]
    assert left == [], f"the closed monitor still observes {left}"
    emulation.remove()



def test_attention_masks_gqa_and_an_error_inside_the_forward():
    """F.scaled_dot_product_attention with a boolean mask, a float mask and grouped-query attention (2 key /
    value heads for 4 query heads) equals the unroll with the mask applied and k, v repeated per head, bit for
    bit, forward and backward; an exception inside an emulated forward leaves no torch function mode on."""
    gen = torch.Generator().manual_seed(14)
    q = torch.randn(2, 4, 5, 8, generator=gen)
    kv = [torch.randn(2, 2, 7, 8, generator=gen) for _ in range(2)]
    g = torch.randn(2, 4, 5, 8, generator=gen)
    bool_mask = torch.rand(5, 7, generator=gen) > 0.3
    bool_mask[:, 0] = True  # no row masked entirely
    float_mask = torch.randn(5, 7, generator=gen)

    class Attend(nn.Module):
        def __init__(self, mask):
            super().__init__()
            self.mask = mask
            self.proj = nn.Linear(8, 8)

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(self.proj(q), k, v, attn_mask=self.mask, enable_gqa=True)

    for name, mask in (("boolean mask", bool_mask), ("float mask", float_mask)):
        torch.manual_seed(15)
        model = Attend(mask)
        leaves = [t.clone().requires_grad_() for t in (q, *kv)]
        with mt.emulate(model, "fp16"):
            y = model(*leaves)
            y.backward(g)
        got = [y.detach()] + [t.grad for t in leaves]
        ref = [t.clone().requires_grad_() for t in (q, *kv)]
        dtype = torch.float16
        _, c = make_counter()
        qp = reference_linear(c, dtype, "proj", ref[0], model.proj.weight, model.proj.bias)
        k, v = (t.repeat_interleave(2, -3) for t in ref[1:])
        scale = 1.0 / math.sqrt(8)
        s = c(torch.matmul(c(qp * scale, dtype, "q", "q_grad"), c(k, dtype, "k", "k_grad").transpose(-2, -1)),
              dtype, "scores", "scores_grad")
        s = s.masked_fill(mask.logical_not(), float("-inf")) if mask.dtype == torch.bool else s + mask
        p = c(torch.softmax(s, dim=-1), dtype, "probs", "probs_grad")
        want = c(torch.matmul(p, c(v, dtype, "v", "v_grad")), dtype, "out", "out_grad")
        want.backward(g)
        wants = [want] + [t.grad for t in ref]
        for what, a, b in zip(("output", "q gradient", "k gradient", "v gradient"), got, wants):
            compare(f"sdpa with a {name}, grouped-query: {what}", a, b)
    model = Attend(None)
    with mt.emulate(model, "fp16"):
        with pytest.raises(TypeError, match=r"proj/in: dtype torch.float16"):
            model(q.half(), *kv)
        assert torch._C._len_torch_function_stack() == 0
        print("after a TypeError inside the emulated forward: no torch function mode on")


def test_cross_attention_and_need_weights_are_emulated():
    """nn.MultiheadAttention as cross-attention (its in-projection uses slices of in_proj_weight, views the
    emulation traces to the parameter) and with need_weights=True (bmm, softmax, bmm, not the sdpa): every
    product rounded, named after the module, the attention weights' products numbered."""
    torch.manual_seed(16)
    mha = nn.MultiheadAttention(16, 2, batch_first=True)
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    with mt.emulate(mha, "fp16") as emulation:
        out, weights = mha(q, kv, kv)  # need_weights=True by default
        out.sum().backward()
        called = {n: s.calls for n, s in emulation.sites.items() if s.calls}
    print(f"cross-attention, need_weights: {called}")
    assert weights.shape == (2, 3, 5)
    # q's product with the first third of in_proj_weight, then k and v (one tensor) with the other two thirds
    # in one product (torch's _in_projection_packed): two products of slices, both at in_proj's sites.
    assert called["MultiheadAttention/in_proj/in"] == 2 and called["MultiheadAttention/in_proj/weight"] == 4
    assert called["MultiheadAttention/bmm/out"] == called["MultiheadAttention/bmm.1/out"] == 1
    assert called["out_proj/out"] == 1 and called["out_proj/out_grad"] == 1


def test_encoder_stack_and_decoder_layer_in_eval_are_emulated():
    """nn.TransformerEncoder in eval mode under no_grad with a padding mask takes torch's nested-tensor fast
    path, and nn.TransformerDecoderLayer has self- and cross-attention: under emulate() every forward site of
    both is called and every output differs from fp32's where fp32's is defined (not padded)."""
    torch.manual_seed(17)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2,
                                enable_nested_tensor=True).eval()
    dec = nn.TransformerDecoderLayer(16, 2, 32, batch_first=True).eval()
    gen = torch.Generator().manual_seed(18)
    x, memory = torch.randn(2, 5, 16, generator=gen), torch.randn(2, 7, 16, generator=gen)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    for name, model, run in (("TransformerEncoder", enc, lambda: enc(x, src_key_padding_mask=padding)),
                             ("TransformerDecoderLayer", dec, lambda: dec(x, memory))):
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on the nested-tensor path
            plain = run()
            with mt.emulate(model, "fp16") as emulation:
                got = run()
                calls = {n: s.calls for n, s in emulation.sites.items() if not n.endswith("grad")}
        kept = ~padding if name == "TransformerEncoder" else torch.ones(2, 5, dtype=torch.bool)
        same = int((got[kept] == plain[kept]).sum())
        print(f"{name}, eval, no_grad: {len(calls)} forward sites, uncalled {[n for n, c in calls.items() if not c]}; "
              f"{same} of {got[kept].numel()} outputs equal to fp32's")
        assert all(calls.values()) and same < got[kept].numel() // 10
