"""The Python API under autograd: out= and in-place rounding refuse tensors autograd records and are seen by
autograd's version check, mpsim.torch.quantize is a differentiable rounding (gradients computed here by
hand), torch / numpy dtypes name formats, emulated models deepcopy / pickle / torch.save, one exception type
per misuse from mpsim and mpsim.torch, and an all-NaN step reports no scale window (docs/python.md,
docs/torch.md). Each test fails on the API before these rules."""
import copy
import io
import os
import pickle
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import mpsim

torch = pytest.importorskip("torch")
import mpsim.torch as mt  # noqa: E402
from torch import nn  # noqa: E402

FP16_MAX = float(np.finfo(np.float16).max)  # 65504, numpy's own


def edge_values():
    """±0, fp16's subnormals and its flush edge, ties, max finite and beyond, inf and NaN, then log-uniform."""
    special = [0.0, -0.0, 2.0**-24, -(2.0**-24), 2.0**-25, 3 * 2.0**-26, 2.0**-14, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
               FP16_MAX, 65519.0, 65520.0, -70000.0, 1e30, float("inf"), float("-inf"), float("nan")]
    g = torch.Generator().manual_seed(35)
    body = torch.exp2(torch.empty(2000).uniform_(-30, 20, generator=g)) * torch.where(
        torch.rand(2000, generator=g) < 0.5, -1.0, 1.0)
    return torch.cat([torch.tensor(special), body])


def same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.int32 if a.dtype == torch.float32 else torch.int64),
                       b.contiguous().view(torch.int32 if b.dtype == torch.float32 else torch.int64))


# ---- out= and in-place ----------------------------------------------------------------------------------
def test_out_refuses_a_tensor_that_requires_grad():
    w = edge_values().requires_grad_()
    before = w.detach().clone()
    with pytest.raises(mpsim.RequiresGradError, match="out requires grad") as info:
        mpsim.round(w, "fp16", out=w)
    print("RequiresGradError:", info.value)
    assert isinstance(info.value, RuntimeError)  # the type torch raises for an in-place op on such a leaf
    assert same_bits(w.detach(), before), "the refused call must not have written"
    with pytest.raises(mpsim.RequiresGradError):
        mpsim.round(edge_values(), "bf16", out=torch.empty(before.shape, requires_grad=True))
    with pytest.raises(mpsim.RequiresGradError):
        mpsim.decode(torch.zeros(4, dtype=torch.uint16), "fp16", out=torch.zeros(4, requires_grad=True))
    with pytest.raises(mpsim.RequiresGradError):  # a view of such a leaf requires grad too
        mpsim.round(w[:8], "fp16", out=w[:8])
    # torch allows in-place updates of such leaves outside autograd (an optimizer's step): so does mpsim.
    with torch.no_grad():
        mpsim.round(w, "fp16", out=w)
    want = before.half().float()
    assert torch.equal(torch.isnan(w.detach()), torch.isnan(want))
    assert torch.equal(w.detach().nan_to_num(), want.nan_to_num())
    print(f"out=w under no_grad: {w.numel()} values equal to w.half().float()")


def test_in_place_rounding_is_seen_by_autograd():
    """y = (w * c).sum() saves c for w's gradient: rounding c in place afterwards must not silently change
    w.grad (it did: w.grad became the rounded c); autograd now refuses the backward, as for torch's own
    in-place ops."""
    c = edge_values()[:64].nan_to_num(0.0, 0.0, 0.0) + 1e-3 * torch.arange(64)
    w = torch.ones(64, requires_grad=True)
    y = (w * c).sum()
    version = c._version
    mpsim.round(c, "fp8_e4m3", out=c)
    assert c._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    # numpy out= and encode into torch out= are counted the same way
    bits = torch.empty(64, dtype=torch.uint16)
    v = bits._version
    mpsim.encode(c, "fp16", out=bits)
    assert bits._version == v + 1
    print("in-place rounding of a saved tensor: backward refused, versions bumped")


# ---- quantize ---------------------------------------------------------------------------------------------
def test_quantize_forward_and_gradients():
    x0 = edge_values()
    g = torch.Generator().manual_seed(7)
    w = torch.exp2(torch.empty(x0.shape).uniform_(-30, 4, generator=g))  # upstream gradients, some tiny
    want_fwd = x0.half().float()  # torch's cast: the independent reference for fp16 nearest-even
    for fmt in ("fp16", torch.float16):
        x = x0.clone().requires_grad_()
        q = mt.quantize(x, fmt)
        assert q.requires_grad and q.grad_fn is not None
        same = (q.detach() == want_fwd) | (torch.isnan(q.detach()) & torch.isnan(want_fwd))
        assert bool(same.all())
        (q * w).sum().backward()
        assert same_bits(x.grad, w), "straight-through: the gradient passes unchanged"
    # clipped: zero beyond fp16's max finite (numpy's 65504) and at NaN
    x = x0.clone().requires_grad_()
    (mt.quantize(x, "fp16", backward="clipped") * w).sum().backward()
    inside = torch.from_numpy(np.abs(x0.numpy()) <= FP16_MAX)
    want = torch.where(inside, w, torch.zeros_like(w))
    assert same_bits(x.grad, want)
    print(f"clipped: {int((~inside).sum())} of {x0.numel()} gradients zeroed (beyond 65504 or NaN)")
    # grad_format: the gradient leaving the op rounded (tiny ones flush in fp16)
    x = x0.clone().requires_grad_()
    (mt.quantize(x, "bf16", grad_format="fp16") * w).sum().backward()
    assert same_bits(x.grad, w.half().float())
    print(f"grad_format=fp16: {int((x.grad == 0).sum())} of {w.numel()} gradients flushed, as w.half()")
    # float64, a block format, stochastic rounding: forward is mpsim.round's, backward the identity
    xd = x0.double().nan_to_num(0.0, 0.0, 0.0).requires_grad_()
    qd = mt.quantize(xd, "fp8_e5m2")
    assert qd.dtype == torch.float64 and same_bits(qd.detach(), mpsim.round(xd.detach(), "fp8_e5m2"))
    qd.sum().backward()
    assert torch.equal(xd.grad, torch.ones_like(xd))
    xb = x0.nan_to_num(0.0, 0.0, 0.0)[:2016].reshape(63, 32).requires_grad_()
    qb = mt.quantize(xb, "mxfp8_e4m3")
    assert same_bits(qb.detach(), mpsim.round(xb.detach(), "mxfp8_e4m3"))
    qs = mt.quantize(xb, "bf16", "sr", seed=5)
    assert same_bits(qs.detach(), mpsim.round(xb.detach(), "bf16", "sr", seed=5))


def test_quantize_bad_input():
    x = torch.ones(4, requires_grad=True)
    for call, exc, match in [(lambda: mt.quantize(x, "fp16", backward="zero"), ValueError, "backward='zero'"),
                             (lambda: mt.quantize(x.reshape(1, 4), "mxfp8_e4m3", backward="clipped"), ValueError,
                              "needs an element format"),
                             (lambda: mt.quantize(x, "fp16", out=x), TypeError, "out="),
                             (lambda: mt.quantize(x, "fp17"), ValueError, "fp17"),
                             (lambda: mt.quantize([1.0], "fp16"), TypeError, "torch.Tensor")]:
        with pytest.raises(exc, match=match) as info:
            call()
        print(type(info.value).__name__, info.value)


def test_quantize_in_quantization_aware_training():
    """A linear model trained with its weight quantized to fp8_e4m3 in forward: the forward always sees
    fp8 values, the fp32 master weight takes the straight-through gradient, the loss falls."""
    torch.manual_seed(3)
    lin = nn.Linear(16, 4, bias=False)
    x = torch.randn(256, 16)
    target = x @ torch.randn(16, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        wq = mt.quantize(lin.weight, "fp8_e4m3")
        assert same_bits(wq.detach(), lin.weight.detach().to(torch.float8_e4m3fn).float())
        loss = ((x @ wq.t() - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    print(f"QAT with fp8_e4m3 weights: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert losses[-1] < losses[0] / 10


# ---- dtypes as formats ------------------------------------------------------------------------------------
DTYPE_NAMES = [(torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float32, "fp32"),
               (torch.float8_e4m3fn, "fp8_e4m3"), (torch.float8_e5m2, "fp8_e5m2"),
               (torch.float8_e4m3fnuz, "fp8_e4m3fnuz"), (torch.float8_e5m2fnuz, "fp8_e5m2fnuz"),
               (np.float16, "fp16"), (np.dtype("float32"), "fp32"), (ml_dtypes.bfloat16, "bf16"),
               (ml_dtypes.float8_e4m3fn, "fp8_e4m3"), (ml_dtypes.float4_e2m1fn, "float4_e2m1fn")]
for _name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):
    if hasattr(torch, _name):
        DTYPE_NAMES.append((getattr(torch, _name), "float8_e8m0fnu" if "e8m0" in _name else "float4_e2m1fn"))


def test_torch_and_numpy_dtypes_name_formats():
    x = edge_values()
    for dtype, name in DTYPE_NAMES:
        assert mpsim.Format(dtype) == mpsim.Format(name), dtype
        assert same_bits(mpsim.round(x, dtype), mpsim.round(x, name)), dtype
        c1, c2 = mpsim.UnderflowCounter(dtype), mpsim.UnderflowCounter(name)
        c1.add(x)
        c2.add(x)
        assert c1 == c2
    print(f"{len(DTYPE_NAMES)} dtypes: Format, round and UnderflowCounter equal to their names'")
    # in mpsim.torch: the monitor's formats, emulate's format and grad_format, quantize
    mon = mt.GradientMonitor(nn.Linear(2, 2), formats=(torch.float16, torch.float8_e5m2))
    assert mon.formats == ("fp16", "fp8_e5m2")
    mon.remove()
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    xin = x[:64].nan_to_num(0.0, 0.0, 0.0).reshape(8, 8)
    outs = []
    for fmt, gfmt in [("bf16", "fp16"), (torch.bfloat16, torch.float16)]:
        with mt.emulate(lin, fmt, grad_format=gfmt) as em:
            outs.append(lin(xin))
            assert em.sites["Linear/out_grad"].fmt in ("fp16", torch.float16)
    assert same_bits(outs[0].detach(), outs[1].detach())
    with pytest.raises(ValueError, match="torch.int8 is not a floating-point format"):
        mpsim.Format(torch.int8)
    with pytest.raises(ValueError, match="torch.complex64"):
        mpsim.round(x, torch.complex64)
    with pytest.raises(TypeError, match="expected a format name"):
        mpsim.Format(None)
    with pytest.raises(TypeError, match="expected a format name"):
        mpsim.UnderflowCounter(3.5)


# ---- copies of emulated models ----------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.rnn = nn.LSTM(8, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        h, _ = self.rnn(torch.relu(self.fc(x)))
        return self.head(h)


def run(model, x):
    model.zero_grad()
    y = model(x)
    y.square().sum().backward()
    return y.detach(), [p.grad.clone() for p in model.parameters()]


class Encoder(nn.Module):
    """A transformer layer: attention's in_proj_weight slices, scaled_dot_product_attention's sites made during
    the first forward, LayerNorm and the feed-forward Linears."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.layer(x))


def via_pickle(m):
    return pickle.loads(pickle.dumps(m))


def via_torch_save(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("net, shape", [(Net, (7, 2, 6)), (Encoder, (2, 5, 8))], ids=["lstm", "transformer"])
def test_emulated_model_deepcopies_pickles_and_saves(net, shape):
    torch.manual_seed(4)
    model = net()
    x = torch.randn(*shape)
    emulation = mt.emulate(model, "bf16", "sr", seed=11)  # stochastic: each copy must continue the seeds
    monitor = mt.GradientMonitor(model, emulation=emulation)  # its observers must not travel with the model
    run(model, x)
    totals = emulation.stats()
    assert mt.Emulation.of(model) is emulation

    copies = {name: make(model) for name, make in
              [("deepcopy", copy.deepcopy), ("pickle", via_pickle), ("torch.save", via_torch_save)]}
    want_y, want_grads = run(model, x)
    emulation.remove()
    fp32_y = model(x).detach()  # the same weights, no emulation
    for name, c in copies.items():
        em = mt.Emulation.of(c)  # the copy's own emulation, holding the copy's sites
        assert em is not None and em is not emulation and em._model is c, name
        sites = em.sites
        assert {n: dict(s.totals) for n, s in sites.items()} == totals, name
        assert all(not s.observers for s in sites.values()), name
        assert all(sites[s.name] is s for m in c.modules() if "_mpsim_sites" in m.__dict__
                   for s in _sites_of(m._mpsim_sites)), name
        y, grads = run(c, x)
        assert same_bits(y, want_y) and all(same_bits(a, b) for a, b in zip(grads, want_grads)), name
        assert not torch.equal(y, fp32_y), f"{name}: the copy's forward is emulated"
        assert em.sites.keys() == totals.keys(), f"{name}: the copy made no site the original did not"
        em.remove()
        assert same_bits(c(x).detach(), fp32_y), f"{name}: remove() on the copy leaves it plain fp32"
        print(f"{name}: {len(sites)} sites with their totals, the next step equal bit for bit to the original's")
    monitor.close()


def _sites_of(tree):
    if isinstance(tree, mt.RoundingSite):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _sites_of(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _sites_of(v)


def test_prepared_rounding_pickles_with_its_totals():
    r = mpsim._core.PreparedRounding(torch.bfloat16, "rtz", 32, "flush", "saturate", "ieee", False)
    x = edge_values().numpy()
    out = np.empty_like(x)
    r.round_into(x, out, 0)
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.totals() == r.totals() and r2.format == r.format and r2.mode == "rtz"
    assert r2.options == {"sr_bits": 32, "subnormals": "flush", "overflow": "saturate", "like": "ieee", "daz": False}
    out2 = np.empty_like(x)
    r2.round_into(x, out2, 0)
    assert np.array_equal(out.view(np.uint32), out2.view(np.uint32))


# ---- at exit ----------------------------------------------------------------------------------------------
def test_no_leak_warnings_at_exit():
    """The README's PyTorch example (emulate, monitor, GradScaler), run as a script: nothing on stderr about
    leaked objects at interpreter exit."""
    script = textwrap.dedent("""
        import torch, mpsim, mpsim.torch as mt
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LSTM(16, 8))
        emulation = mt.emulate(model, "fp16")
        scaler = torch.amp.GradScaler("cpu")
        monitor = mt.GradientMonitor(model, every=2, scaler=scaler, emulation=emulation)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(4):
            out, _ = model(torch.randn(5, 3, 8))
            loss = out.square().mean()
            scaler.scale(loss).backward()
            monitor.step(loss)
            scaler.step(opt); scaler.update(); opt.zero_grad()
        q = mt.quantize(torch.randn(4, requires_grad=True), "fp8_e4m3")  # a graph left alive at exit
        print("done")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    print("stderr:", r.stderr.strip() or "(empty)")
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
    assert "leaked" not in r.stderr


# ---- one exception type per misuse --------------------------------------------------------------------------
def test_one_exception_type_per_misuse():
    meta = torch.empty(8, device="meta")
    sparse = torch.eye(4).to_sparse()
    ints = torch.ones(8, dtype=torch.int32)
    lin = nn.Linear(8, 8)
    mon = mt.GradientMonitor(lin)
    cases = {
        mpsim.UnsupportedDeviceError: [lambda: mpsim.round(meta, "fp16"), lambda: mpsim.encode(meta, "fp16"),
                                       lambda: mpsim.Histogram().add(meta),
                                       lambda: mpsim.UnderflowCounter("fp16").add(meta),
                                       lambda: mon.observe("mine", meta), lambda: mt.quantize(meta, "fp16"),
                                       lambda: mpsim.round(torch.ones(8), "fp16", out=torch.empty(8, device="meta"))],
        mpsim.UnsupportedLayoutError: [lambda: mpsim.round(sparse, "fp16"), lambda: mpsim.encode(sparse, "fp16"),
                                       lambda: mpsim.Histogram().add(sparse), lambda: mon.observe("mine", sparse),
                                       lambda: mt.quantize(sparse, "fp16")],
        mpsim.UnsupportedDtypeError: [lambda: mpsim.round(ints, "fp16"), lambda: mon.observe("mine", ints),
                                      lambda: mpsim.round(np.ones(3, np.int16), "fp16"),
                                      lambda: mpsim.UnderflowCounter("fp16").add(ints)],
        mpsim.RequiresGradError: [lambda: mpsim.round(torch.ones(8), "fp16", out=torch.ones(8, requires_grad=True))],
    }
    for exc, calls in cases.items():
        for i, call in enumerate(calls):
            with pytest.raises(exc) as info:
                call()
            assert type(info.value) is exc, (exc.__name__, i, type(info.value))
        print(f"{exc.__name__} ({', '.join(b.__name__ for b in exc.__mro__[1:-2])}): {len(calls)} misuses, "
              f"e.g. {info.value}")
    # the built-in types the first releases raised still catch them
    with pytest.raises(TypeError):
        mpsim.round(meta, "fp16")
    with pytest.raises(ValueError):
        mon.observe("mine", meta)
    mon.remove()


# ---- an all-NaN step ----------------------------------------------------------------------------------------
def test_all_nan_step_reports_no_window(tmp_path):
    torch.manual_seed(2)
    lin = nn.Linear(4, 3)
    mon = mt.GradientMonitor(lin, every=1, out=tmp_path)
    (lin(torch.randn(5, 4)).sum() * float("nan")).backward()
    report = mon.step(float("nan"))
    mon.close()
    assert report["skipped"] is True
    for f, kinds in report["formats"].items():
        act = kinds["activation_grad"]
        assert act["total"]["nonzero_finite_num"] == 0
        assert act["window"] is None and act["recommended_log2_scale"] is None, (f, act["window"])
    header, row = (tmp_path / "steps.csv").read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["fp16:window_lo"] == "" and cells["fp16:window_hi"] == ""
    print("all-NaN step: skipped, no window in any format, steps.csv window cells empty")
