"""mpsim.torch.emulate(model, recipe=...): the scaling recipes of lib/mpsim/recipe on a PyTorch model's linear
GEMMs (docs/torch.md#recipes).

  * every role's operand, for every recipe mpsim.recipe_names() lists, equals what a separate mpsim.Recipe of the
    same spec gives for the same tensor laid out by hand (rows x the GEMM's reduction axis), fed in the order the
    simulator's linear layer quantizes (lib/mpsim/nn/linear.hpp lines 15-31), bit for bit; and the model's output
    and its gradients equal the GEMMs written out by hand on those quantized values, bit for bit;
  * Conv2d against numpy's im2col and the GEMMs written out; Conv1d with its input gradient; a parameter on either
    side of a matmul against two Linear layers; bit for bit;
  * Emulation.mass_lost() per role against numpy's shares and mpsim._core.mass_lost;
  * delayed scaling advances with Emulation.step() and not within a step or under no_grad; a deepcopy continues;
  * the refusals: an unknown recipe (the known ones listed), a bad option, recipe= with a format, a Conv3d, a
    grouped Conv2d, an LSTM, float64 parameters;
  * nn.TransformerEncoderLayer, attention included, against a hand unroll by role, bit for bit;
  * GradientMonitor under a recipe (below, "the monitor"): its counts per LAYER/ROLE against the scaled operands
    rounded independently by ml_dtypes.

torchao's own float8 training is compared in test_torch_emulate_recipe_torchao.py."""
import copy
import csv
import json
import math
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mpsim  # noqa: E402
import mpsim.torch as mt  # noqa: E402

SPECS = mpsim.recipe_names() + ["fp8-tensorwise-current:power_2_scales=1", "mxfp8:scaling_mode=rceil", "nvfp4:sr=0"]


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(48, 40), nn.ReLU(), nn.Linear(40, 24))


def batch(seed=1, n=36):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 48, generator=g) * torch.exp2(torch.empty(n, 48).uniform_(-8, 4, generator=g))
    return x, torch.randn(n, 24, generator=g)


def bits_differ(a, b):
    return int((a.detach().contiguous().view(torch.int32) != b.detach().contiguous().view(torch.int32)).sum())


def reference(spec, model, x, t, gemm_out=lambda v: v):
    """The MLP's forward and backward under `spec` written out: each GEMM's two operands quantized by a separate
    Recipe in the simulator's order, products in fp32 (then passed through gemm_out). Returns (output,
    {param name: grad}, {LAYER/ROLE: values})."""
    r = mpsim.Recipe(spec)
    got = {}

    def q(a, role, layer):
        v = torch.from_numpy(r.quantize(np.ascontiguousarray(a.detach().numpy()), role, layer)["values"])
        got[f"{layer}/{role}"] = v
        return v

    w1, b1, w2, b2 = (p.detach() for p in model.parameters())
    h = gemm_out(q(x, "fprop_x", "0") @ q(w1, "fprop_w", "0").t()) + b1
    a = torch.relu(h)
    y = gemm_out(q(a, "fprop_x", "2") @ q(w2, "fprop_w", "2").t()) + b2
    yy = y.clone().requires_grad_()
    nn.functional.mse_loss(yy, t).backward()  # the loss's own gradient (torch's mse_loss_backward)
    dy = yy.grad
    # fc2: dgrad (dy, w^T) then wgrad (dy^T, a^T); fc1: wgrad only (x needs no gradient).
    da = gemm_out(q(dy, "dgrad_dy", "2") @ q(w2.t(), "dgrad_w", "2").t())
    dw2 = gemm_out(q(dy.t(), "wgrad_dy", "2") @ q(a.t(), "wgrad_x", "2").t())
    dh = torch.where(h > 0, da, 0.0)  # relu's backward: +0 where h <= 0 (da * 0 would give -0)
    dw1 = gemm_out(q(dh.t(), "wgrad_dy", "0") @ q(x.t(), "wgrad_x", "0").t())
    grads = {"0.weight": dw1, "0.bias": dh.sum(0), "2.weight": dw2, "2.bias": dy.sum(0)}
    return y, grads, got


@pytest.mark.parametrize("spec", SPECS)
def test_roles_and_gradients_equal_the_recipe(spec):
    model = mlp()
    want_y, want_g, want_q = reference(spec, copy.deepcopy(model), *batch())
    x, t = batch()
    e = mt.emulate(model, recipe=spec)
    seen = {}
    e.operand_observers.append(lambda name, operand, values: seen.setdefault(name, values.clone()))
    y = model(x)
    nn.functional.mse_loss(y, t).backward()
    assert sorted(seen) == sorted(want_q)
    differ = {name: bits_differ(seen[name], want_q[name]) for name in want_q}
    values = sum(v.numel() for v in want_q.values())
    y_differ = bits_differ(y, want_y)
    g_differ = {n: bits_differ(p.grad, want_g[n]) for n, p in model.named_parameters()}
    stats = e.stats()
    print(f"{spec}: {len(want_q)} operands, {values} values, {sum(differ.values())} differ; output {y.numel()} "
          f"values, {y_differ} differ; gradients {g_differ}; fc1 fprop_x underflow {stats['0/fprop_x']['underflow']}")
    assert sum(differ.values()) == 0 and y_differ == 0 and not any(g_differ.values())
    # The roles' layouts: rows x the GEMM's reduction axis.
    assert tuple(seen["0/fprop_x"].shape) == (36, 48) and tuple(seen["0/wgrad_x"].shape) == (48, 36)
    assert tuple(seen["2/dgrad_w"].shape) == (40, 24) and tuple(seen["2/wgrad_dy"].shape) == (24, 36)
    # fp8-rowwise-gw-hp leaves wgrad in high precision: no value counted there (docs/recipes.md)
    wgrad_count = 0 if spec == "fp8-rowwise-gw-hp" else 24 * 36
    assert stats["0/fprop_x"]["count"] == 36 * 48 and stats["2/wgrad_dy"].get("count", 0) == wgrad_count


def test_delayed_scaling_advances_at_step():
    model = mlp()
    x, t = batch()
    e = mt.emulate(model, recipe="fp8-tensorwise-delayed:amax_history_len=4")

    def step():
        nn.functional.mse_loss(model(x), t).backward()

    step()
    first = e.recipe.state()
    assert all(scale == 1.0 for _, scale in first.values())  # every tensor starts at scale 1 (docs/recipes.md)
    with torch.no_grad():
        model(x * 1000)  # an evaluation pass: no record into the histories
    assert e.recipe.state() == first
    e.step()
    after = e.recipe.state()
    amax = float(x.abs().max())
    want = np.float32(448.0) / np.float32(amax)  # TE: fp8_max * 2^-margin / amax in float (margin 0)
    print(f"delayed: 0/x amax {amax:.6g}, scale after step {after['0/x'][1]:.9g}, fp8_max / amax {want:.9g}; "
          f"{len(after)} tensors")
    assert np.float32(after["0/x"][1]) == want
    history = after["0/x"][0]
    assert history[0] == 0.0 and max(history) == np.float32(amax)  # rolled: a fresh entry records the next step


def test_refusals():
    with pytest.raises(ValueError, match="mxfp8") as err:
        mt.emulate(mlp(), recipe="mxfp9")
    print("unknown recipe:", err.value)
    with pytest.raises(ValueError, match="cannot be combined with format"):
        mt.emulate(mlp(), "fp16", recipe="mxfp8")
    with pytest.raises(ValueError, match="cannot be combined with mode, weights"):
        mt.emulate(mlp(), mode="sr", weights=False, recipe="mxfp8")
    with pytest.raises(ValueError, match="does not take option 'fp8_format'") as err:
        mt.emulate(mlp(), recipe="mxfp4:fp8_format=HYBRID")
    print("bad option:", err.value)
    with pytest.raises(TypeError, match="recipe must be"):
        mt.emulate(mlp(), recipe=3)
    for bad, kind in ((nn.Conv3d(3, 4, 3), "Conv3d"), (nn.Conv2d(4, 4, 3, groups=2), "Conv2d"), (nn.LSTM(4, 4), "LSTM")):
        with pytest.raises(ValueError, match=kind) as err:
            mt.emulate(nn.Sequential(bad), recipe="mxfp8")
        print("refused:", err.value)
    with pytest.raises(mpsim.UnsupportedDtypeError):
        mt.emulate(mlp().double(), recipe="mxfp8")


def test_deepcopy_keeps_the_recipe_state():
    model = mlp()
    x, t = batch()
    e = mt.emulate(model, recipe="fp8-tensorwise-delayed")
    nn.functional.mse_loss(model(x), t).backward()
    e.step()
    twin = copy.deepcopy(model)
    copy_e = mt.Emulation.of(twin)
    assert copy_e.recipe.state() == e.recipe.state() and copy_e.recipe is not e.recipe
    y1, y2 = model(x), twin(x)
    print(f"deepcopy under fp8-tensorwise-delayed: {y1.numel()} outputs, {bits_differ(y1, y2)} differ")
    assert bits_differ(y1, y2) == 0


def im2col(x, kh, kw, stride, pad):
    """(N * Ho * Wo, C * kh * kw) columns of x (N, C, H, W) written out with numpy indexing: row (n, oh, ow),
    column (c, i, j) = the padded input at (oh * stride + i, ow * stride + j)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    out = np.empty((n, ho, wo, c, kh, kw), np.float32)
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, :, i, j] = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride].transpose(0, 2, 3, 1)
    return np.ascontiguousarray(out.reshape(n * ho * wo, c * kh * kw)), ho, wo


@pytest.mark.parametrize("spec", ["mxfp8", "nvfp4:sr=0", "fp8-tensorwise-delayed", "fp8-blockwise"])
def test_conv2d_is_the_gemm_of_im2col(spec):
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 5 * 5, 6))
    g = torch.Generator().manual_seed(6)
    x, t = torch.randn(4, 3, 9, 9, generator=g), torch.randn(4, 6, generator=g)
    r = mpsim.Recipe(spec)

    def q(a, role, layer):
        return torch.from_numpy(r.quantize(np.ascontiguousarray(np.asarray(a, np.float32)), role, layer)["values"])

    wc, bc, wl, bl = (p.detach() for p in model.parameters())
    cols, ho, wo = im2col(x.numpy(), 3, 3, 2, 1)
    conv = (q(cols, "fprop_x", "0") @ q(wc.reshape(8, -1).numpy(), "fprop_w", "0").t()).reshape(4, ho * wo, 8)
    h = conv.transpose(1, 2).reshape(4, 8, ho, wo) + bc.reshape(1, 8, 1, 1)
    a = torch.relu(h).reshape(4, -1)
    y = q(a.numpy(), "fprop_x", "3") @ q(wl.numpy(), "fprop_w", "3").t() + bl
    yy = y.clone().requires_grad_()
    nn.functional.mse_loss(yy, t).backward()
    dy = yy.grad
    da = q(dy.numpy(), "dgrad_dy", "3") @ q(wl.t().numpy(), "dgrad_w", "3").t()
    dwl = q(dy.t().numpy(), "wgrad_dy", "3") @ q(a.t().numpy(), "wgrad_x", "3").t()
    dh = torch.where(h > 0, da.reshape(h.shape), 0.0)
    dh_rows = dh.reshape(4, 8, ho * wo).transpose(1, 2).reshape(-1, 8)  # (N * Ho * Wo, OC)
    dwc = (q(dh_rows.t().numpy(), "wgrad_dy", "0") @ q(cols.T, "wgrad_x", "0").t()).reshape(wc.shape)

    mt.emulate(model, recipe=spec)
    got = model(x)
    nn.functional.mse_loss(got, t).backward()
    want = {"0.weight": dwc, "0.bias": dh.sum((0, 2, 3)), "3.weight": dwl, "3.bias": dy.sum(0)}
    differ = {n: bits_differ(p.grad, want[n]) for n, p in model.named_parameters()}
    print(f"{spec} Conv2d(3, 8, 3, stride 2, pad 1) + Linear against numpy im2col: output {bits_differ(got, y)} of "
          f"{y.numel()} differ; gradients {differ}")
    assert bits_differ(got, y) == 0 and not any(differ.values())


def test_conv1d_with_input_gradient():
    """Conv1d (kernel 2, stride 2: the windows do not overlap, so the input gradient is the columns' gradient put
    back in place, without sums) under mxfp8: output, input gradient and weight gradient against the GEMMs
    written out."""
    torch.manual_seed(7)
    conv = nn.Conv1d(4, 6, 2, stride=2, bias=False)
    g = torch.Generator().manual_seed(8)
    x, dy = torch.randn(3, 4, 10, generator=g), torch.randn(3, 6, 5, generator=g)
    r = mpsim.Recipe("mxfp8")

    def q(a, role):
        return torch.from_numpy(r.quantize(np.ascontiguousarray(np.asarray(a, np.float32)), role, "0")["values"])

    w = conv.weight.detach().reshape(6, 8)
    cols = x.numpy().reshape(3, 4, 5, 2).transpose(0, 2, 1, 3).reshape(15, 8)  # row (n, l), column (c, k)
    y = (q(cols, "fprop_x") @ q(w.numpy(), "fprop_w").t()).reshape(3, 5, 6).transpose(1, 2)
    dy_rows = dy.transpose(1, 2).reshape(15, 6)
    dcols = q(dy_rows.numpy(), "dgrad_dy") @ q(w.t().numpy(), "dgrad_w").t()
    dx = dcols.reshape(3, 5, 4, 2).permute(0, 2, 1, 3).reshape(3, 4, 10)
    dw = (q(dy_rows.t().numpy(), "wgrad_dy") @ q(cols.T, "wgrad_x").t()).reshape(6, 4, 2)

    model = nn.Sequential(conv)
    mt.emulate(model, recipe="mxfp8")
    xg = x.clone().requires_grad_()
    got = model(xg)
    got.backward(dy)
    checks = {"output": (got, y), "dx": (xg.grad, dx), "dw": (conv.weight.grad, dw)}
    differ = {k: bits_differ(a, b) for k, (a, b) in checks.items()}
    print(f"mxfp8 Conv1d(4, 6, 2, stride 2) against the GEMMs written out: {differ} differ of "
          f"{ {k: a.numel() for k, (a, _) in checks.items()} }")
    assert not any(differ.values())


class _Matmuls(nn.Module):
    """x @ A with A (K, N) a parameter, then B @ h^T with B (M, N): the weight on either side of a matmul."""

    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = nn.Parameter(a), nn.Parameter(b)

    def forward(self, x):
        return (self.b @ (x @ self.a).t()).t()


def test_matmul_with_a_parameter_equals_the_linear():
    """x @ A and B @ h^T under a recipe are the GEMMs of Linear layers with weights A^T and B: the same roles,
    so the same bits, forward and backward (weights named after their parameters: MODULE/a, MODULE/b)."""
    torch.manual_seed(9)
    lin = nn.Sequential(nn.Linear(48, 40, bias=False), nn.Linear(40, 24, bias=False))
    mm = _Matmuls(lin[0].weight.detach().t().clone(), lin[1].weight.detach().clone())
    x, t = batch()
    e1, e2 = mt.emulate(lin, recipe="nvfp4:sr=0"), mt.emulate(mm, recipe="nvfp4:sr=0")
    y1, y2 = lin(x), mm(x)
    nn.functional.mse_loss(y1, t).backward()
    nn.functional.mse_loss(y2, t).backward()
    checks = {"output": (y1, y2), "first weight": (lin[0].weight.grad, mm.a.grad.t()),
              "second weight": (lin[1].weight.grad, mm.b.grad)}
    differ = {k: bits_differ(u, v) for k, (u, v) in checks.items()}
    print(f"nvfp4 x @ A, B @ h^T vs two Linear layers: {differ} differ; sites {sorted(e2.stats())[:3]} ...")
    assert not any(differ.values()) and "_Matmuls/a/fprop_w" in e2.stats() and "_Matmuls/b/wgrad_x" in e2.stats()
    assert len(e1.stats()) == len(e2.stats()) == 10


@pytest.mark.parametrize("spec", ["fp8-none", "mxfp4"])
def test_mass_lost_per_role(spec):
    """Emulation.mass_lost() against the shares computed here with numpy from the operands and the values the
    observer saw (summed over the calls of a role: two steps), and, for fp8-none (scale 1, x in e4m3),
    against mpsim._core.mass_lost of the same operand rounded to e4m3 by mpsim.round's path."""
    model = mlp()
    x, t = batch()
    e = mt.emulate(model, recipe=spec)
    seen = {}
    e.operand_observers.append(
        lambda name, operand, values: seen.setdefault(name, []).append((operand.detach().double().numpy().ravel(),
                                                                         values.double().numpy().ravel())))
    for _ in range(2):
        nn.functional.mse_loss(model(x * 2 ** -6), t).backward()
    got = e.mass_lost()
    worst = 0.0
    for name, calls in seen.items():
        g = np.concatenate([c[0] for c in calls])
        q = np.concatenate([c[1] for c in calls])
        finite = np.isfinite(g) & (g != 0)
        lost = finite & (q == 0)
        l1 = np.abs(g[lost]).sum() / np.abs(g[finite]).sum()
        worst = max(worst, abs(l1 - got[name]["l1_lost"]))
        assert got[name]["mass_flushed_num"] == int(lost.sum()) and got[name]["mass_nonzero_num"] == int(finite.sum())
    print(f"{spec}: {len(seen)} roles, l1_lost of fc1/fprop_x {got['0/fprop_x']['l1_lost']:.4g}, "
          f"worst difference to numpy {worst:.3g}")
    assert worst < 1e-12 and 0 < got["0/fprop_x"]["l1_lost"] < 1
    if spec == "fp8-none":
        want = mpsim._core.mass_lost(np.ascontiguousarray(np.concatenate([c[0] for c in seen["0/fprop_x"]]),
                                                          np.float32), "fp8_e4m3")
        print(f"fp8-none fc1/fprop_x vs mass_lost(x, e4m3): l1_lost {got['0/fprop_x']['l1_lost']!r} vs "
              f"{want['l1_lost']!r}, cosine {got['0/fprop_x']['cosine']!r} vs {want['cosine']!r}")
        # two calls summed one after the other vs one call on their concatenation: the same sums, grouped
        # differently (MassLost adds in blocks of 4096), so equal to rounding in double
        assert abs(got["0/fprop_x"]["l1_lost"] - want["l1_lost"]) < 1e-14
        assert abs(got["0/fprop_x"]["cosine"] - want["cosine"]) < 1e-14
        assert got["0/fprop_x"]["mass_flushed_num"] == want["mass_flushed_num"]


class _RefGemm(torch.autograd.Function):
    """The reference of one linear GEMM under a recipe, written out: y = q(x) q(w)^T; dx = q(dy) q(w^T)^T,
    dw = q(dy^T) q(x^T)^T, each operand laid out rows x reduction axis and quantized by `q` (docs/recipes.md)."""

    @staticmethod
    def forward(ctx, x, w, q, name):
        ctx.save_for_backward(x, w)
        ctx.q, ctx.name = q, name
        return q(x, "fprop_x", name) @ q(w, "fprop_w", name).t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        q, name = ctx.q, ctx.name
        dx = q(dy, "dgrad_dy", name) @ q(w.t(), "dgrad_w", name).t()
        dw = q(dy.t(), "wgrad_dy", name) @ q(x.t(), "wgrad_x", name).t()
        return dx, dw, None, None


class _RefBatchedGemm(torch.autograd.Function):
    """Attention's products under a recipe, written out: _RefGemm's roles over G groups, each role's operand the
    groups' matrices stacked along the rows (x (G, N, K), w (G, M, K); docs/torch.md#recipes)."""

    @staticmethod
    def forward(ctx, x, w, q, name):
        ctx.save_for_backward(x, w)
        ctx.q, ctx.name = q, name
        g, n, k = x.shape
        m = w.shape[1]
        return q(x.reshape(g * n, k), "fprop_x", name).reshape(g, n, k) @ \
            q(w.reshape(g * m, k), "fprop_w", name).reshape(g, m, k).transpose(1, 2)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        q, name = ctx.q, ctx.name
        g, n, k = x.shape
        m = w.shape[1]
        dx = q(dy.reshape(g * n, m), "dgrad_dy", name).reshape(g, n, m) @ \
            q(w.transpose(1, 2).reshape(g * k, m), "dgrad_w", name).reshape(g, k, m).transpose(1, 2)
        dw = q(dy.transpose(1, 2).reshape(g * m, n), "wgrad_dy", name).reshape(g, m, n) @ \
            q(x.transpose(1, 2).reshape(g * k, n), "wgrad_x", name).reshape(g, k, n).transpose(1, 2)
        return dx, dw, None, None


def reference_attention_under_recipe(q, k, v, quant, prefix):
    """scores = (q / sqrt(E)) k^T and out = softmax(scores) v, each product by role through _RefBatchedGemm."""
    B, H, L, E = q.shape
    S = k.shape[2]
    scores = _RefBatchedGemm.apply((q * (1.0 / math.sqrt(E))).reshape(B * H, L, E), k.reshape(B * H, S, E), quant,
                                   f"{prefix}/qk")
    p = torch.softmax(scores, dim=-1)
    out = _RefBatchedGemm.apply(p, v.transpose(-2, -1).reshape(B * H, E, S), quant, f"{prefix}/pv")
    return out.reshape(B, H, L, E)


def reference_encoder_layer_under_recipe(layer, x, q, attention=True):
    """nn.TransformerEncoderLayer (batch_first, post-norm, ReLU, no dropout) as its slow path computes it
    (torch/nn/modules/transformer.py, F.multi_head_attention_forward): the four linear GEMMs (in_proj,
    out_proj, linear1, linear2) through _RefGemm with the bias added in fp32 after the product; attention's two
    products through _RefBatchedGemm, or (attention=False) in fp32."""
    attn = layer.self_attn
    B, T, E = x.shape
    H = attn.num_heads

    def linear(t, w, b, name):
        y = _RefGemm.apply(t.reshape(-1, t.shape[-1]), w, q, name)
        return y.reshape(*t.shape[:-1], w.shape[0]) + b

    xt = x.transpose(0, 1)
    proj = linear(xt, attn.in_proj_weight, attn.in_proj_bias, "self_attn/in_proj")
    proj = proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    qh, kh, vh = (t.view(T, B * H, E // H).transpose(0, 1).view(B, H, T, E // H) for t in (proj[0], proj[1], proj[2]))
    if attention:
        a = reference_attention_under_recipe(qh, kh, vh, q, "self_attn/sdpa")
    else:
        a = nn.functional.scaled_dot_product_attention(qh, kh, vh)
    a = a.permute(2, 0, 1, 3).contiguous().view(B * T, E)
    a = linear(a, attn.out_proj.weight, attn.out_proj.bias, "self_attn.out_proj").view(T, B, E).transpose(0, 1)
    h = layer.norm1(x + a)
    f = linear(h, layer.linear1.weight, layer.linear1.bias, "linear1")
    f = linear(torch.relu(f), layer.linear2.weight, layer.linear2.bias, "linear2")
    return layer.norm2(h + f)


@pytest.mark.parametrize("spec, width, tokens", [("fp8-tensorwise-current", 16, 5), ("mxfp8", 16, 5),
                                                  ("nvfp4:sr=0", 16, 5), ("nvfp4:sr=0", 32, 16)])
def test_transformer_layer_under_a_recipe_equals_a_hand_unroll(spec, width, tokens):
    """Item 2 of issue 35: MultiheadAttention's projections (the packed in_proj, out_proj) and the MLP's Linear
    layers are quantized by role as any Linear, and so are attention's two products (q k^T as self_attn/sdpa/qk,
    p v as self_attn/sdpa/pv); nvfp4's 16x16 weight tiles do not fit 5 keys per head, so there attention runs in
    fp32 with one NotEmulatedWarning naming the module and scaled_dot_product_attention (with 16 keys and heads of
    16 they fit, and attention is quantized). Output, input gradient and all 12 parameter gradients against the
    unroll, bit for bit, and the same operands quantized."""
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(width, 2, 48, dropout=0.0, batch_first=True)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, tokens, width, generator=gen)
    g = torch.randn(3, tokens, width, generator=gen)
    r = mpsim.Recipe(spec)
    attention = not spec.startswith("nvfp4") or tokens % 16 == 0 and width // 2 % 16 == 0
    want_q = {}

    def q(a, role, name):
        v = torch.from_numpy(r.quantize(np.ascontiguousarray(a.detach().numpy()), role, name)["values"])
        want_q[f"{name}/{role}"] = want_q.get(f"{name}/{role}", 0) + v.numel()
        return v

    def run(forward):
        for p in layer.parameters():
            p.grad = None
        xx = x.clone().requires_grad_()
        y = forward(xx)
        y.backward(g)
        return y.detach(), xx.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}

    want_y, want_dx, want_g = run(lambda t: reference_encoder_layer_under_recipe(layer, t, q, attention))
    e = mt.emulate(layer, recipe=spec)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got_y, got_dx, got_g = run(layer)
    sdpa_warnings = [str(m.message) for m in w if issubclass(m.category, mt.NotEmulatedWarning)]
    e.remove()
    differ = {"output": bits_differ(got_y, want_y), "input gradient": bits_differ(got_dx, want_dx)}
    differ.update({n: bits_differ(got_g[n], want_g[n]) for n in want_g})
    counts = {k: v["count"] for k, v in e.stats().items()}
    print(f"{spec} TransformerEncoderLayer({width}, 2, 48), {tokens} tokens: {len(differ)} tensors compared "
          f"({got_y.numel() + got_dx.numel() + sum(t.numel() for t in got_g.values())} values), "
          f"{sum(differ.values())} bits differ; {len(counts)} operands quantized "
          f"({sum(1 for k in counts if '/sdpa/' in k)} of attention's); warnings: {sdpa_warnings}")
    assert not any(differ.values()), differ
    assert counts == want_q and len(counts) == (6 if attention else 4) * 6
    if attention:
        assert sdpa_warnings == []
    else:
        assert len(sdpa_warnings) == 1
        assert re.search(r"self_attn .*scaled_dot_product_attention under nvfp4 .*16x16", sdpa_warnings[0])
    plain_y = layer(x)
    assert not torch.equal(plain_y, got_y)


# ---- the monitor under a recipe ----------------------------------------------------------------------------
# GradientMonitor under emulate(model, recipe=...): per LAYER/ROLE, what the recipe flushed, made subnormal and
# saturated in its own formats, and the gradient mass it lost (docs/torch.md#recipes), against an independent count.
#
# The reference takes each operand the recipe quantized and the scales it chose (Recipe.quantize's "scales",
# captured by an observer of the test's own), applies the scale with numpy (fp8 recipes: x * scale, torchao's
# float8_training_tensor.py 153-154; MX: x / 2^k; nvfp4: x / (T * S) in float32, torchao's nvfp4 arithmetic,
# docs/recipes.md), rounds the scaled operand to the element format with ml_dtypes' casts (round to nearest even,
# an implementation of its own) and counts: the non-zero finite values, those that became 0, those that became
# subnormal, those beyond the element's largest finite value. The monitor's integer counts must equal these bit for
# bit, on the sampled steps only; its l1_lost / l2sq_lost against numpy's shares of the operand and the values the
# GEMM multiplied.


def elements(ml_dtypes):
    """The element formats per recipe at its default options, (x and w, dy): docs/recipes.md's table (HYBRID: dy in
    e5m2 for the tensorwise recipes; torchao's rowwise and TE's blockwise and MXFP8 keep e4m3 everywhere)."""
    E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    return {
        "fp8-none": (E4M3, E5M2),
        "fp8-tensorwise-current": (E4M3, E5M2),
        "fp8-tensorwise-delayed": (E4M3, E5M2),
        "fp8-rowwise": (E4M3, E4M3),
        "fp8-blockwise": (E4M3, E4M3),
        "mxfp8": (E4M3, E4M3),
        "mxfp6_e2m3": (ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e2m3fn),
        "mxfp4": (ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn),
        "nvfp4": (ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn),
    }


# The block length along the reduction axis (and of a 2-D tile's side): docs/recipes.md.
BLOCK = {"fp8-blockwise": 128, "mxfp8": 32, "mxfp6_e2m3": 32, "mxfp4": 32, "nvfp4": 16}
# One recipe per scale rule (per tensor from the history, per row, per 1x128 tile / 128x128 block, per MX block,
# nvfp4's two levels with its Hadamard-transformed wgrad); nvfp4's stochastic rounding has no independent count.
MONITOR_SPECS = ["fp8-tensorwise-delayed", "fp8-rowwise", "fp8-blockwise", "mxfp6_e2m3", "nvfp4:sr=0"]


def monitor_batch(step, n=36):
    """Inputs spread over 2^-24 .. 2^4 so that every recipe flushes some elements of x and of the gradients."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(n, 48, generator=g) * torch.exp2(torch.empty(n, 48).uniform_(-24, 4, generator=g))
    return x, torch.randn(n, 24, generator=g)


def expand(scales, rows, cols, tile):
    """The (rows, cols) array of each element's scale from Recipe.quantize's (scale_rows, scale_cols) grid: one
    per tensor, per row, per 1 x tile block along the row, or per tile x tile square (nvfp4's and blockwise's w)."""
    sr, sc = scales.shape
    br = 1 if sr == rows else (rows if sr == 1 else tile)
    bc = cols if sc == 1 else tile
    return np.repeat(np.repeat(scales, br, axis=0)[:rows], bc, axis=1)[:, :cols]


def independent_counts(ml_dtypes, name, role, operand, got):
    """(nonzero finite, underflow, subnormal, overflow) of the scaled operand rounded by ml_dtypes."""
    a = operand.numpy().astype(np.float32)
    rows, cols = a.shape
    if got["hadamard"]:  # nvfp4's wgrad operands are quantized after the transform (docs/recipes.md)
        a = mpsim._core.hadamard16(np.ascontiguousarray(a))
    s = expand(np.asarray(got["scales"]), rows, cols, BLOCK.get(name, 1)).astype(np.float32)
    scaled = a * s if name.startswith("fp8") else a / s  # float32 arithmetic, as the C++ (block.cpp 243-265)
    element = elements(ml_dtypes)[name][1 if role.endswith("_dy") else 0]
    info = ml_dtypes.finfo(element)
    finite = np.isfinite(scaled) & (scaled != 0)
    v = scaled[finite]
    r = v.astype(element).astype(np.float32)
    under = int((r == 0).sum())
    sub = int(((r != 0) & (np.abs(r) < float(info.smallest_normal))).sum())
    over = int((np.abs(v) > float(info.max)).sum())
    return int(finite.sum()), under, sub, over


@pytest.mark.parametrize("spec", MONITOR_SPECS)
def test_monitor_counts_equal_the_scaled_operands_rounded_independently(spec, tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    name = spec.split(":")[0]
    model = mlp()
    e = mt.emulate(model, recipe=spec)
    monitor = mt.GradientMonitor(model, formats=["fp16"], every=2, emulation=e, out=tmp_path, hist_every=1)
    captured = []  # (step, LAYER/ROLE, operand, got) of every quantization
    step = [1]
    e.quantize_observers.append(lambda site, a, got: captured.append((step[0], site, a.clone(), dict(got))))
    results = []
    for k in range(1, 4):  # steps 1 and 3 sampled (every=2)
        step[0] = k
        x, t = monitor_batch(k)
        loss = nn.functional.mse_loss(model(x), t)
        loss.backward()
        if k == 1:
            with torch.no_grad():
                model(x * 1000)  # an evaluation forward on a sampled step: not a training step's, not counted
        e.step()
        results.append(monitor.step(loss))
        with torch.no_grad():  # SGD written out: torch.optim's first step imports torch._dynamo (seconds)
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
    monitor.close()
    assert results[1] is None and results[0]["recipe"]["spec"] == e.recipe.spec

    want = {}  # (step, site) -> counts
    for k, site, a, got in captured:
        if not got["record"] or k == 2:
            continue
        role = site.rpartition("/")[2]
        c = independent_counts(ml_dtypes, name, role, a, got)
        old = want.get((k, site), (0, 0, 0, 0))
        want[(k, site)] = tuple(u + v for u, v in zip(old, c))
    keys = ("nonzero_finite_num", "underflows_num", "subnormals_num", "overflows_num")
    mismatches, compared, flushed, saturated = [], 0, 0, 0
    for (k, site), c in sorted(want.items()):
        st = results[0 if k == 1 else 2]["recipe"]["sites"][site]
        got = tuple(st[key] for key in keys)
        compared += c[0]
        flushed += c[1]
        saturated += c[3]
        if got != c:
            mismatches.append((k, site, got, c))
    sites = sorted({s for _, s in want})
    print(f"{spec}: {len(sites)} operands x 2 sampled steps, {compared} non-zero values; flushed {flushed}, "
          f"saturated {saturated}; "
          f"{len(mismatches)} mismatches {mismatches[:3]}")
    assert not mismatches and flushed > 0
    assert sorted(results[0]["recipe"]["sites"]) == sites

    # The mass lost of the run totals against numpy's shares over both sampled steps.
    report = json.loads((tmp_path / "underflow.json").read_text())["recipe"]
    worst = 0.0
    for site in sites:
        calls = [(a.numpy().astype(np.float64).ravel(), got["values"].astype(np.float64).ravel())
                 for k, s, a, got in captured if s == site and k != 2 and got["record"]]
        st = report["sites"][site]
        if not captured_quantized(captured, site):
            assert "l1_lost" not in st
            continue
        g = np.concatenate([c[0] for c in calls])
        q = np.concatenate([c[1] for c in calls])
        nz = np.isfinite(g) & (g != 0)
        lost = nz & (q == 0)
        l1 = np.abs(g[lost]).sum() / np.abs(g[nz]).sum()
        l2 = (g[lost] ** 2).sum() / (g[nz] ** 2).sum()
        worst = max(worst, abs(l1 - st["l1_lost"]), abs(l2 - st["l2sq_lost"]))
        assert st["mass_flushed_num"] == int(lost.sum()) and st["mass_nonzero_num"] == int(nz.sum())
        assert st["underflows_num"] == sum(want[(k, site)][1] for k in (1, 3))
    print(f"{spec}: mass lost of {len(sites)} operands over the run, worst difference to numpy {worst:.3g}; "
          f"total l1_lost {report['total'].get('l1_lost')}, gradients' {report['dy_total'].get('l1_lost')}")
    assert worst < 1e-12

    # steps.csv: the per-operand shares and the totals of each sampled step, as step() returned them.
    rows = list(csv.DictReader(open(tmp_path / "steps.csv")))
    assert [r["step"] for r in rows] == ["1", "3"]
    for row, res in zip(rows, (results[0], results[2])):
        rec = res["recipe"]
        for site in sites:
            assert float(row[f"{site}:zero@recipe"]) == rec["sites"][site]["zero"]
        assert float(row["recipe:underflow"]) == rec["total"]["zero"]
        assert float(row["recipe:dy_underflow"]) == rec["dy_total"]["zero"]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["config"]["recipe"] == e.recipe.spec


def captured_quantized(captured, site):
    return any(s == site and got["quantized"] and not got["hadamard"] for _, s, _, got in captured)


def test_monitor_totals_and_remove():
    """The total is the sum of the operands' counts (sorted order), dy_total that of dgrad_dy and wgrad_dy; after
    remove() the emulation has no observer of the monitor's and nothing more is counted."""
    model = mlp()
    e = mt.emulate(model, recipe="mxfp4")
    monitor = mt.GradientMonitor(model, formats=["fp8_e5m2"], every=1, emulation=e)
    x, t = monitor_batch(1)
    nn.functional.mse_loss(model(x), t).backward()
    res = monitor.step()["recipe"]
    sites = res["sites"]
    for total, pick in (("total", lambda s: True), ("dy_total", lambda s: s.endswith("_dy"))):
        for key in ("count", "nonzero_finite_num", "underflows_num", "subnormals_num", "overflows_num"):
            assert res[total][key] == sum(st[key] for s, st in sites.items() if pick(s))
    print(f"mxfp4: {len(sites)} operands, total underflow {res['total']['underflows_num']} of "
          f"{res['total']['nonzero_finite_num']}, gradients' {res['dy_total']['underflows_num']}")
    assert len(e.quantize_observers) == 1
    monitor.remove()
    assert e.quantize_observers == []
    nn.functional.mse_loss(model(x), t).backward()
    assert monitor._recipe_counts == {}
