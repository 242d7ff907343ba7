"""mpsim.torch.emulate on torch.nn.LSTM and nn.LSTMCell (and nn.GRU, nn.GRUCell: at the end), checked three ways:

  * the unrolled recurrence: emulated in fp64 (every rounding exact for float64 tensors), an LSTM of float64
    parameters gives torch.nn.LSTM's own outputs, final states and gradients (input, initial states, every
    parameter) to 1e-12 of their largest value, for one and two layers, both directions, batch_first, no
    bias, dropout, unbatched input and given initial states; the sites are the simulator's, called as often
    and on as many values as it calls them;
  * against the simulator: the lstm language model of lib/mpsim/models/lstm_lm.cpp with torch.nn.LSTM under
    emulate("fp16") in place of its LSTM, on the weights and the batch of a simulator step
    (build/tests/models/mpsim_layer_dump, test_sim_vs_torch.py's machinery), embedding and fc layer as
    tests/python/torch_models.py writes them. Bit for bit against torch_models.LstmLm (the same torch
    operations in the same order, its sites rounded by mpsim.round): loss, every LSTM site's values before
    rounding, every count, every gradient. Against the simulator's own step (Eigen's GEMMs, another
    summation order): each site's values and the forward output and gradients within 4 fp16 ulps of the
    tensor's largest value (2^-8; the fp32 values differ in their last bits, a few then round to the
    neighbouring fp16 value, 2^-10 of it at most, and the step carries that on), the counts within
    test_sim_vs_torch's allowance 1 + 3 sqrt(count);
  * the rounding itself, independently of mpsim: every value a site returns, forward and backward, equals
    torch's own cast of its input (Tensor.half() / .bfloat16(), round to nearest even); fp8_e4m3 and
    stochastic rounding give representable values and repeat bit for bit from their seed.
Plus the refusals (proj_size, PackedSequence, RNN, malformed states), remove() restoring the fp32 module bit
for bit, and GradientMonitor(emulation=...) counting at the LSTM's activation-gradient sites.
"""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_main import require_torch  # noqa: E402

torch = require_torch(__name__)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import mpsim  # noqa: E402
import mpsim.torch as mt  # noqa: E402
import test_sim_vs_torch as svt  # noqa: E402
import torch_models as tm  # noqa: E402

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}
SIM_ULPS = 4  # the tolerance against the simulator, in ulps of the low format at a tensor's largest value


def format_ulp(v, fmt):
    """The spacing of fmt's values at magnitude v: 2^(floor(log2 v) - man_bits), and the subnormal spacing
    min_normal * 2^-man_bits below the normal range."""
    f = mpsim.Format(fmt)
    return max(2.0 ** math.floor(math.log2(v)) if v > 0 else 0.0, f.min_normal) * 2.0 ** -f.man_bits


def relative_difference(got, want):
    """max |got - want| / max |want| over the tensor (0 for two zero tensors)."""
    got, want = got.detach().double(), want.detach().double()
    scale = float(want.abs().max()) if want.numel() else 0.0
    diff = float((got - want).abs().max()) if want.numel() else 0.0
    return diff / scale if scale > 0 else diff


# ------------------------------------------------------------ the unrolled recurrence ----------------------

def expected_site_values(m, T, B, sites):
    """{site: (calls, values)} one forward and backward of LSTM (or GRU) m on (T, B) inputs makes, from the simulator's
    placement of the sites (lib/mpsim/nn/lstm.hpp, lstm_lm.cpp): the input, weights and input product once per
    forward, h_in / hh_out / gates_grad / h_grad once per time step, the input and weight gradients once."""
    D = 2 if m.bidirectional else 1
    gru = isinstance(m, nn.GRU)  # a GRU: 3 gates, the two products' gradients and the two biases' apart
    name, H, G = type(m).__name__, m.hidden_size, (3 if gru else 4) * m.hidden_size
    want = {}
    for k in range(m.num_layers):
        I = m.input_size if k == 0 else D * H
        layer = "" if m.num_layers == 1 and D == 1 else f"l{k}/"
        want[f"{name}/{layer}in"] = want[f"{name}/{layer}in_grad"] = (1, T * B * I)
        for d in range(D):
            p = f"{name}/{layer}" if d == 0 else f"{name}/l{k}_reverse/"
            want.update({p + "w_ih": (1, G * I), p + "w_hh": (1, G * H), p + "ih_out": (1, T * B * G),
                         p + "h_in": (T, T * B * H), p + "hh_out": (T, T * B * G), p + "h_grad": (T, T * B * H),
                         p + "w_ih_grad": (1, G * I), p + "w_hh_grad": (1, G * H)})
            want.update({p + "ih_grad": (T, T * B * G), p + "hh_grad": (T, T * B * G)} if gru else
                        {p + "gates_grad": (T, T * B * G)})
            if m.bias:
                want.update({p + "b_ih_grad": (1, G), p + "b_hh_grad": (1, G)} if gru else {p + "b_grad": (1, G)})
    assert set(want) == set(sites), sorted(set(want) ^ set(sites))
    return want


LSTM_CONFIGS = [
    dict(),
    dict(num_layers=2),
    dict(batch_first=True, bias=False),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(num_layers=3, dropout=0.4),
    dict(unbatched=True, num_layers=2),
    dict(states=True, num_layers=2, bidirectional=True),
]


def assert_close_in_float64(what, reference, names, got, want):
    """Every tensor within 1e-12 of its largest value (float64 rounding noise); prints the worst."""
    worst = max((relative_difference(g, w), n) for g, w, n in zip(got, want, names))
    print(f"{what}: {len(names)} tensors, {sum(w.numel() for w in want)} values against {reference} (float64), "
          f"worst relative difference {worst[0]:.2e} ({worst[1]})")
    assert worst[0] < 1e-12, worst


def float64_recurrent_module(module_type, config, seed, T=6, B=3, I=5, H=7):
    """(module, unbatched, states, T, B, I, H, D, input shape, input x) of a float64 LSTM / GRU configured by
    `config` (with the test's own keys `unbatched` and `states` taken out)."""
    config = dict(config)
    unbatched, states = config.pop("unbatched", False), config.pop("states", False)
    torch.manual_seed(seed)
    m = module_type(I, H, dtype=torch.float64, **config)
    D = 2 if m.bidirectional else 1
    shape = (T, I) if unbatched else ((B, T, I) if m.batch_first else (T, B, I))
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    return m, unbatched, states, T, B, I, H, D, shape, x


@pytest.mark.parametrize("config", LSTM_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_unrolled_lstm_equals_torch_lstm_in_float64(config):
    m, unbatched, states, T, B, I, H, D, shape, x = float64_recurrent_module(nn.LSTM, config, 11)
    hx = None
    if states:
        hx = tuple(torch.randn(m.num_layers * D, B, H, dtype=torch.float64, requires_grad=True) for _ in range(2))
    # A loss that weights every output, the final h and the final c differently, so each reaches a gradient.
    weights = [torch.randn(t, dtype=torch.float64) for t in ((*shape[:-1], D * H), (m.num_layers * D,) +
                                                              ((H,) if unbatched else (B, H)))]

    leaves = [x] + list(hx or ()) + list(m.parameters())

    def run():
        for t in leaves:
            t.grad = None
        torch.manual_seed(5)  # dropout draws the same masks on both sides
        out, (h, c) = m(x, hx)
        loss = (out * weights[0]).sum() + (h * weights[1]).sum() + (c * weights[1]).square().sum()
        loss.backward()  # (autograd.grad would skip h_0's gradient, which the simulator computes and rounds)
        return [out.detach(), h.detach(), c.detach()] + [t.grad for t in leaves]

    want = run()
    emulation = mt.emulate(m, "fp64")
    got = run()
    emulation.remove()
    names = ["output", "h_n", "c_n", "input grad"] + (["h_0 grad", "c_0 grad"] if states else []) + \
        [f"{n} grad" for n, _ in m.named_parameters()]
    assert_close_in_float64(f"LSTM {config or 'plain'}{' unbatched' if unbatched else ''}"
                            f"{' with (h_0, c_0)' if states else ''}", "torch.nn.LSTM", names, got, want)
    counts = expected_site_values(m, T, 1 if unbatched else B, emulation.sites)
    seen = {name: (s.calls, s.totals.get("count", 0)) for name, s in emulation.sites.items()}
    assert seen == counts, {k: (seen[k], counts[k]) for k in counts if seen[k] != counts[k]}
    print(f"  {len(counts)} sites, calls and values as the simulator's: {dict(list(seen.items())[:7])} ...")


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_unrolled_cell_equals_torch_cell_in_float64(kind):
    T, B, I, H = 5, 4, 3, 6
    torch.manual_seed(12)
    gru = kind == "GRUCell"
    cell = getattr(nn, kind)(I, H, dtype=torch.float64)
    x = torch.randn(T, B, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)

    leaves = [x, h0] + list(cell.parameters())

    def run():
        for t in leaves:
            t.grad = None
        h, c, outs = h0, torch.zeros(B, H, dtype=torch.float64), []
        for t in range(T):
            if gru:
                h = cell(x[t], h)
            else:
                h, c = cell(x[t], (h, c))
            outs.append(h)
        out = torch.stack(outs)
        (out.square().sum() + c.sum()).backward()
        return [out.detach(), c.detach()] + [t.grad for t in leaves]

    want = run()
    with mt.emulate(cell, "fp64") as emulation:
        got = run()
        single = cell(x[0, 0].detach())  # unbatched, no state
    assert (single if gru else single[0]).shape == (H,)
    worst = max(relative_difference(g, w) for g, w in zip(got, want))
    calls = {n: s.calls for n, s in emulation.sites.items()}
    print(f"{kind} over {T} steps: {len(want)} tensors against torch.nn.{kind} (float64), worst relative "
          f"difference {worst:.2e}; site calls {calls}")
    assert worst < 1e-12
    # Every call of the cell is a forward: each site (weights included) rounds once per call.
    assert calls[f"{kind}/w_ih"] == calls[f"{kind}/h_in"] == T + 1
    if gru:
        assert calls["GRUCell/ih_grad"] == calls["GRUCell/hh_grad"] == calls["GRUCell/b_hh_grad"] == T
    else:
        assert calls["LSTMCell/gates_grad"] == calls["LSTMCell/w_hh_grad"] == calls["LSTMCell/b_grad"] == T


# ------------------------------------------------------------ against the simulator -------------------------

def emulated_lstm_lm_step(meta, tensors, fmt, loss_scale):
    """The simulator's lstm model with torch.nn.LSTM under emulate(fmt) (module name "lstm", so the sites have
    the simulator's names), the embedding and fc layer as torch_models.LstmLm writes them with their sites
    rounded by mpsim.round. Returns (loss, LSTM output (T, B, H), {site: [values before rounding, per call]},
    emulation stats, {parameter: gradient} in the dump's names)."""
    H = svt.LSTM_HIDDEN
    p = {k: torch.tensor(tensors[f"param/{k}"]) for k in tm.LSTM_PARAMS}
    V = p["fc/bias"].numel()
    emb = p["embed/weight"].reshape(V, -1).clone().requires_grad_()
    fc_w = p["fc/weight"].reshape(V, H).clone().requires_grad_()
    fc_b = p["fc/bias"].clone().requires_grad_()
    model = nn.ModuleDict({"lstm": nn.LSTM(emb.shape[1], H)})
    lstm = model["lstm"]
    with torch.no_grad():  # the simulator's one bias in bias_ih, bias_hh 0 (its sum is then bias_ih exactly)
        lstm.weight_ih_l0.copy_(p["lstm/w_ih"].reshape(4 * H, -1))
        lstm.weight_hh_l0.copy_(p["lstm/w_hh"].reshape(4 * H, H))
        lstm.bias_ih_l0.copy_(p["lstm/bias"])
        lstm.bias_hh_l0.zero_()
    sites = tm.Sites(rounds=tm.MIXED_CLASSES, round_fn=lambda x: mpsim.round(x.contiguous(), fmt))
    seen = {}
    emulation = mt.emulate(model, fmt)
    for site in emulation.sites.values():
        site.observers.append(lambda name, x: seen.setdefault(name, []).append(x.detach().clone()))
    inputs = torch.as_tensor(np.asarray(meta["inputs"]), dtype=torch.long)
    targets = torch.as_tensor(np.asarray(meta["targets"]), dtype=torch.long)
    T, B = inputs.shape
    x = F.embedding(inputs, sites.bwd("embed/w_grad", tm.WEIGHT_GRAD, emb))  # (T, B, 32)
    out, _ = lstm(x)
    h_all = sites.fwd("fc/in", tm.MATMUL_INPUT, sites.bwd("fc/in_grad", tm.ACTIVATION_GRAD, out.reshape(T * B, H)))
    w = sites.bwd("fc/w_grad", tm.WEIGHT_GRAD, sites.fwd("fc/w", tm.MATMUL_INPUT, fc_w))
    b = sites.bwd("fc/b_grad", tm.WEIGHT_GRAD, fc_b)
    logits = sites.bwd("fc/out_grad", tm.ACTIVATION_GRAD, sites.fwd("fc/out", tm.MATMUL_OUTPUT, h_all @ w.t() + b))
    loss = F.cross_entropy(logits, targets.reshape(-1))
    (loss * loss_scale).backward()
    emulation.remove()
    assert torch.equal(lstm.bias_ih_l0.grad, lstm.bias_hh_l0.grad)  # both biases get the rounded b_grad
    grads = {"embed/weight": emb.grad, "lstm/w_ih": lstm.weight_ih_l0.grad, "lstm/w_hh": lstm.weight_hh_l0.grad,
             "lstm/bias": lstm.bias_ih_l0.grad, "fc/weight": fc_w.grad, "fc/bias": fc_b.grad}
    return loss.item(), out.detach(), seen, emulation.stats(), {k: v.reshape(-1) for k, v in grads.items()}


STAT_NAMES = {"count": "count", "zero_in": "zero_in", "exact": "exact", "rounded": "rounded", "underflow": "underflow",
              "subnormal": "subnormal", "overflow": "overflow_num"}  # torch_models / dump name -> mpsim.round's


def check_against_simulator(batch, loss_scale, fmt):
    meta, tensors = svt.dump("lstm", f"mixed-{fmt}", batch, loss_scale)
    loss, out, seen, stats, grads = emulated_lstm_lm_step(meta, tensors, fmt, loss_scale)
    lstm_sites = [s["name"] for s in meta["sites"] if s["name"].startswith("lstm/")]
    assert sorted(seen) == sorted(lstm_sites), sorted(set(seen) ^ set(lstm_sites))
    rows = {site: torch.stack([v.reshape(-1) for v in seen[site]]) for site in lstm_sites}  # in call order

    # 1. torch_models.LstmLm, the unrolled cell, with mpsim.round at all its sites: the same ops in the same
    #    order, so the same bits everywhere.
    mirror = tm.Sites(rounds=tm.MIXED_CLASSES, round_fn=lambda x: mpsim.round(x.contiguous(), fmt),
                      min_normal=svt.LOW_FORMATS[fmt][1])
    model = tm.LstmLm(tensors, svt.LSTM_HIDDEN)
    mirror_loss = model.step(meta["inputs"], meta["targets"], mirror, loss_scale)
    differ = [] if loss == mirror_loss else ["loss"]
    values = 0
    for site in lstm_sites:
        want = torch.from_numpy(mirror.stacked(site, svt.call_order(meta, site))).float()
        values += want.numel()
        if not torch.equal(rows[site], want):
            differ.append(f"site {site}")
        differ += [f"{site} {k}" for k, ours in STAT_NAMES.items() if stats[site][ours] != mirror.stats[site][k]]
    if not torch.equal(out.reshape(-1, svt.LSTM_HIDDEN), mirror.values["fc/in"][0]):  # fc's input before rounding
        differ.append("LSTM output")
    mirror_grads = model.grads()
    for name, g in grads.items():
        values += g.numel()
        if not np.array_equal(g.double().numpy(), mirror_grads[name]):
            differ.append(f"grad {name}")
    print(f"\nlstm (batch {meta['batch']}), {fmt}, loss scale {loss_scale:g}: emulated torch.nn.LSTM against "
          f"torch_models.LstmLm (mpsim.round at its sites): {len(lstm_sites)} sites with their {len(STAT_NAMES)} "
          f"counts, the output and {len(grads)} gradients, {values} values: {len(differ)} differ")
    assert not differ, differ

    # 2. The simulator's own step: values within SIM_ULPS ulps of each tensor's largest, counts within the
    #    allowance.
    print(f"  against the simulator: {'tensor':20s} {'values':>7s} {'max|sim|':>9s} {'max|diff|':>9s} "
          f"{'ulps':>5s} {'same ' + fmt:>9s}  underflow / subnormal / overflow (simulator, emulation)")
    failures, worst = [], (0.0, "")

    def compare(name, ours, theirs, counts=""):
        nonlocal worst
        ours, theirs = ours.reshape(-1).double(), torch.as_tensor(theirs).reshape(-1).double()
        finite = torch.isfinite(theirs)
        scale = float(theirs[finite].abs().max())
        diff = float((ours[finite] - theirs[finite]).abs().max())
        ulps = diff / format_ulp(scale, fmt)
        same = float((ours == theirs).double().mean())
        worst = max(worst, (ulps, name))
        ok = ulps <= SIM_ULPS and torch.equal(torch.isfinite(ours), finite)
        print(f"  {'':22s} {name:20s} {ours.numel():7d} {scale:9.2e} {diff:9.2e} {ulps:5.2f} {same:9.4f}  {counts}"
              f"{'' if ok else '  FAIL'}")
        if not ok:
            failures.append(f"{name}: max |difference| {diff:.3e} = {ulps:.2f} ulps of {fmt} at {scale:.3e}")

    # The input and the weight copies come before any summation: the same bits as the simulator's.
    for site in ("lstm/in", "lstm/w_ih", "lstm/w_hh"):
        if not torch.equal(rows[site], torch.from_numpy(tensors[f"site/{site}"])):
            failures.append(f"{site}: not the simulator's values bit for bit")
    cpp_stats = meta["site_stats"]
    for site in lstm_sites:
        cells = []
        for k in ("underflow", "subnormal", "overflow"):
            a, b = cpp_stats[site][STAT_NAMES[k]], stats[site][STAT_NAMES[k]]  # the dump has mpsim.round's names
            cells.append(f"{a}/{b}")
            if abs(a - b) > svt.count_allowance(a, b):
                failures.append(f"{site} {k}: simulator {a}, emulation {b}")
        compare(site, rows[site], torch.from_numpy(tensors[f"site/{site}"]), " ".join(cells))
    compare("output h", out, torch.from_numpy(tensors["site/fc/in"]))  # the fc layer's input before rounding
    for name in ("lstm/w_ih", "lstm/w_hh", "lstm/bias", "embed/weight"):
        compare(f"grad {name}", grads[name], torch.from_numpy(tensors[f"grad/{name}"]))
    print(f"  worst {worst[1]} at {worst[0]:.2f} ulps (tolerance {SIM_ULPS}), {len(failures)} failures")
    assert not failures, failures


@pytest.mark.parametrize("batch", svt.BATCHES, ids=lambda b: f"batch{b or 16}")
def test_emulated_lstm_equals_simulator_mixed_fp16(batch):
    for scale in svt.SCALES["lstm"]:
        check_against_simulator(batch, scale, "fp16")


def test_emulated_lstm_equals_simulator_mixed_bf16():
    check_against_simulator(2, 1.0, "bf16")


# ------------------------------------------------------------ the rounding itself ---------------------------

def recorded_run(fmt, mode="rne", seed=0, record=True):
    """A two-layer LSTM and a Linear under emulate(fmt, mode), one forward and backward; returns (output,
    gradients, [(site, kind, input, output)] of every rounding, the emulation)."""
    torch.manual_seed(21)
    model = nn.ModuleDict({"lstm": nn.LSTM(6, 8, num_layers=2), "fc": nn.Linear(8, 3)})
    x = (torch.randn(7, 4, 6) * 4).requires_grad_()
    calls = []
    original = mt.RoundingSite.__call__

    def recording(site, t):
        y = original(site, t)
        if record:
            calls.append((site.name, site.kind, t.detach().clone(), y.detach().clone()))
        return y

    mt.RoundingSite.__call__ = recording
    try:
        with mt.emulate(model, fmt, mode=mode, seed=seed) as emulation:
            out, _ = model["lstm"](x)
            y = model["fc"](out)
            (y.square().sum() * 2.0**-12).backward()  # small gradients: many fp16 subnormals
    finally:
        mt.RoundingSite.__call__ = original
    grads = [x.grad] + [p.grad for p in model.parameters()]
    return y.detach(), grads, calls, emulation


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_every_site_rounds_as_torch_casts(fmt):
    y, grads, calls, emulation = recorded_run(fmt)
    bad, values, kinds = [], 0, {}
    for name, kind, before, after in calls:
        values += before.numel()
        kinds[kind] = kinds.get(kind, 0) + 1
        if not torch.equal(after, before.to(TORCH_DTYPE[fmt]).float()):
            bad.append(f"{name}: differs from torch's cast")
        if not torch.equal(after, mpsim.round(before.contiguous(), fmt)):
            bad.append(f"{name}: differs from mpsim.round")
    lstm_sites = {name for name, *_ in calls if name.startswith("lstm/")}
    print(f"{fmt}: {len(calls)} roundings at {len(lstm_sites)} LSTM sites and 6 Linear sites ({kinds}), {values} "
          f"values: {len(bad)} differ from torch's {TORCH_DTYPE[fmt]} cast or mpsim.round of the site's input")
    assert not bad, bad[:10]
    assert len(lstm_sites) == 2 * 12 and set(kinds) == {"forward", "weight", "activation_grad", "weight_grad"}
    # What the module hands on is representable too: the output of the fc, the parameter gradients.
    for t in [y] + grads:
        assert torch.equal(t, t.to(TORCH_DTYPE[fmt]).float())


def test_fp8_and_stochastic_rounding_are_representable_and_reproducible():
    for fmt, mode in (("fp8_e4m3", "rne"), ("fp16", "sr"), ("bf16", "sr"), ("fp8_e4m3", "sr")):
        first, grads1, calls, _ = recorded_run(fmt, mode, seed=3)
        again, grads2, _, _ = recorded_run(fmt, mode, seed=3, record=False)
        other, grads3, _, _ = recorded_run(fmt, mode, seed=4, record=False)
        unrepresentable = 0
        for _, _, _, after in calls:
            finite = after[torch.isfinite(after)]
            unrepresentable += int((finite != finite.to(TORCH_DTYPE[fmt]).float()).sum())
        same = torch.equal(first, again) and all(torch.equal(a, b) for a, b in zip(grads1, grads2))
        differs = not torch.equal(first, other) or not all(torch.equal(a, b) for a, b in zip(grads1, grads3))
        print(f"{fmt} {mode}: {sum(c[3].numel() for c in calls)} rounded values, {unrepresentable} not representable; "
              f"seed 3 repeated bit for bit: {same}; seed 4 differs: {differs}")
        assert unrepresentable == 0 and same
        if mode == "sr":
            assert differs


def test_weights_false_and_a_gradient_format_of_its_own():
    torch.manual_seed(51)
    lstm = nn.LSTM(4, 5, num_layers=2)
    x = torch.randn(6, 3, 4, requires_grad=True)
    with mt.emulate(lstm, "fp8_e4m3", grad_format="fp8_e5m2", weights=False) as emulation:
        out, _ = lstm(x)
        out.sum().backward()
    kinds = {}
    for site in emulation.sites.values():
        kinds.setdefault(site.kind, set()).add(site.fmt)
    print(f"weights=False, e4m3 forward, e5m2 backward: {len(emulation.sites)} sites, formats by kind {kinds}")
    assert kinds == {"forward": {"fp8_e4m3"}, "activation_grad": {"fp8_e5m2"}}
    assert len(emulation.sites) == 2 * 7  # in, ih_out, h_in, hh_out, gates_grad, h_grad, in_grad per layer
    # The input's gradient was rounded to e5m2; the weight gradients (fp32 sums of e5m2 values) were not.
    assert torch.equal(x.grad, x.grad.to(torch.float8_e5m2).float())
    w = lstm.weight_hh_l0.grad
    assert not torch.equal(w, w.to(torch.float8_e5m2).float())


# ------------------------------------------------------------ refusals, remove(), the monitor ---------------

def test_refusals_name_the_module_and_the_option():
    with pytest.raises(ValueError, match=r"emulate: rnn is an LSTM with proj_size=3"):
        mt.emulate(nn.ModuleDict({"rnn": nn.LSTM(4, 6, proj_size=3)}), "fp16")
    with pytest.raises(TypeError, match=r"emulate: rnn is a RNN; the hooks emulate .*LSTM, LSTMCell"):
        mt.emulate(nn.ModuleDict({"rnn": nn.RNN(4, 6)}), "fp16", module_types=(nn.RNN,))
    lstm = nn.LSTM(4, 6)
    with mt.emulate(lstm, "fp16"):
        packed = nn.utils.rnn.pack_padded_sequence(torch.randn(5, 2, 4), [5, 3])
        with pytest.raises(TypeError, match="LSTM got a PackedSequence"):
            lstm(packed)
        with pytest.raises(ValueError, match=r"LSTM: hx must be a tuple \(h_0, c_0\) of 3-D tensors"):
            lstm(torch.randn(5, 2, 4), torch.zeros(1, 2, 6))
        with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 6\), got \[1, 3, 6\]"):
            lstm(torch.randn(5, 2, 4), (torch.zeros(1, 3, 6), torch.zeros(1, 3, 6)))
        with pytest.raises(ValueError, match="LSTM: LSTM input must be 2-D"):
            lstm(torch.randn(5))
        with pytest.raises(TypeError, match=r"LSTM input: dtype torch.float16"):
            lstm(torch.randn(5, 2, 4, dtype=torch.float16))
    cell = nn.LSTMCell(4, 6)
    with mt.emulate(cell, "fp16"):
        with pytest.raises(ValueError, match=r"LSTMCell: hx must be a tuple \(h_0, c_0\) of 2-D tensors"):
            cell(torch.randn(2, 4), (torch.zeros(2, 6), None))
        with pytest.raises(ValueError, match="LSTMCell: LSTMCell input must be 1-D"):
            cell(torch.randn(1, 2, 4))
    print("proj_size, RNN, PackedSequence, a bare h_0, a wrong batch, a 1-D input, a float16 input, an LSTMCell's "
          "state without c_0 and its 3-D input: refused, each naming the module and what is wrong")


def test_remove_restores_the_fp32_modules():
    torch.manual_seed(31)
    lstm, cell = nn.LSTM(5, 6, num_layers=2, bidirectional=True), nn.LSTMCell(5, 6)
    x = torch.randn(4, 3, 5)

    def run():
        for p in list(lstm.parameters()) + list(cell.parameters()):
            p.grad = None
        out, (h, c) = lstm(x)
        hc = cell(x[0])
        (out.sum() + h.sum() + c.sum() + hc[0].sum() + hc[1].sum()).backward()
        return [out, h, c, *hc] + [p.grad.clone() for p in list(lstm.parameters()) + list(cell.parameters())]

    plain = run()
    with mt.emulate(nn.ModuleList([lstm, cell]), "fp8_e4m3"):
        emulated = run()
    again = run()
    assert all(torch.equal(a, b) for a, b in zip(plain, again))
    changed = sum(int((a != b).sum()) for a, b in zip(plain, emulated))
    assert changed > 0
    assert "forward" not in lstm.__dict__ and "_mpsim_sites" not in cell.__dict__
    print(f"after remove(): {len(plain)} tensors, {sum(t.numel() for t in plain)} values equal to the plain "
          f"modules' bit for bit; under e4m3 {changed} differed")


def test_monitor_counts_the_lstm_activation_gradient_sites():
    torch.manual_seed(41)
    model = nn.ModuleDict({"lstm": nn.LSTM(6, 8), "fc": nn.Linear(8, 2)})
    emulation = mt.emulate(model, "fp16")
    monitor = mt.GradientMonitor(model, formats=["fp16"], every=1, emulation=emulation)
    for _ in range(2):
        out, _ = model["lstm"](torch.randn(9, 4, 6, requires_grad=True))
        (model["fc"](out).square().mean() * 2.0**-12).backward()  # many gradients in fp16's subnormal range
        monitor.step()
    rows = []
    for site in ("lstm/gates_grad", "lstm/h_grad", "lstm/in_grad", "fc/in_grad", "fc/out_grad"):
        counted = monitor.totals["activation_grad"][site].counters["fp16"].underflow(0)
        rounded = emulation.stats()[site]
        rows.append((site, counted["numel"], counted["underflows_num"], counted["subnormals_num"]))
        assert (counted["numel"], counted["underflows_num"], counted["subnormals_num"]) == \
            (rounded["count"], rounded["underflow"], rounded["subnormal"]), site
    assert rows[0][2] > 0 and rows[0][3] > 0  # gates_grad: both flushed and subnormal values
    print("monitor and emulation agree (site, values, underflow, subnormal): " + "; ".join(map(str, rows)))
    emulation.remove()
    monitor.close()


# ------------------------------------------------------------ the GRU, unrolled -----------------------------

GRU_CONFIGS = [dict(), dict(num_layers=2, bidirectional=True, batch_first=True), dict(bias=False),
               dict(num_layers=3, dropout=0.4), dict(unbatched=True, num_layers=2),
               dict(states=True, num_layers=2, bidirectional=True)]


@pytest.mark.parametrize("config", GRU_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_unrolled_gru_equals_torch_gru_in_float64(config):
    """emulate(model, "fp64") rounds nothing of a float64 GRU: the unroll (torch.nn.GRU's equations, gate order
    r, z, n) gives torch's own GRU's output, final state and every gradient; each site rounds as often and as
    many values as documented (per forward: in, w_ih, w_hh, ih_out; per time step: h_in, hh_out, and in backward
    ih_grad, hh_grad, h_grad; per backward: in_grad and the weight and bias gradients)."""
    m, unbatched, states, T, B, I, H, D, shape, x = float64_recurrent_module(nn.GRU, config, 21)
    h0 = torch.randn(m.num_layers * D, B, H, dtype=torch.float64, requires_grad=True) if states else None
    w_out = torch.randn(*shape[:-1], D * H, dtype=torch.float64)
    w_h = torch.randn((m.num_layers * D,) + ((H,) if unbatched else (B, H)), dtype=torch.float64)
    leaves = [x] + ([h0] if states else []) + list(m.parameters())

    def run():
        for t in leaves:
            t.grad = None
        torch.manual_seed(5)  # dropout draws the same masks on both sides
        out, h = m(x, h0)
        ((out * w_out).sum() + (h * w_h).square().sum()).backward()
        return [out.detach(), h.detach()] + [t.grad for t in leaves]

    want = run()
    with mt.emulate(m, "fp64") as emulation:
        got = run()
        seen = {name: (s.calls, s.totals.get("count", 0)) for name, s in emulation.sites.items()}
    names = ["output", "h_n", "input grad"] + (["h_0 grad"] if states else []) + \
        [f"{n} grad" for n, _ in m.named_parameters()]
    assert_close_in_float64(f"GRU {config or 'plain'}{' unbatched' if unbatched else ''}"
                            f"{' with h_0' if states else ''}", "torch.nn.GRU", names, got, want)
    counts = expected_site_values(m, T, 1 if unbatched else B, seen)
    assert seen == counts, sorted(set(seen.items()) ^ set(counts.items()))
    print(f"  {len(counts)} sites, calls and values as documented")


def test_gru_cell_rounds_as_torch_casts_in_fp16():
    """In fp16 (a float32 cell), every rounding of a GRUCell, forward and backward, returns torch's cast of what
    it was given (its float64 unroll: test_unrolled_cell_equals_torch_cell_in_float64)."""
    T, B, I, H = 5, 4, 3, 6
    torch.manual_seed(22)
    cell = nn.GRUCell(I, H)
    x = torch.randn(T, B, I)
    # In fp16 (a float32 cell), every rounding, forward and backward, returns torch's cast of what it was given.
    pairs = []
    call = mt.RoundingSite.__call__

    def recording(site, t):
        y = call(site, t)
        pairs.append((site.name, t.detach().clone(), y))
        return y

    mt.RoundingSite.__call__ = recording
    try:
        with mt.emulate(cell, "fp16"):
            h, xf = torch.zeros(B, H), x.clone().requires_grad_()
            for t in range(T):
                h = cell(xf[t], h)
            (h * 2.0**-10).sum().backward()  # small gradients: some reach fp16's subnormals
    finally:
        mt.RoundingSite.__call__ = call
    values = sum(t.numel() for _, t, _ in pairs)
    for name, t, y in pairs:
        assert torch.equal(y, t.half().float()), name
    sites = sorted({n for n, _, _ in pairs})
    print(f"GRUCell fp16: {len(pairs)} roundings at {len(sites)} sites, {values} values, each equal to torch's "
          f".half() cast of its input")
    assert len(sites) == 14
