"""The any-device paths, run on the CPU with the code a CUDA tensor takes (docs/python.md#devices,
docs/torch.md#devices): rounding through torch's casts equals mpsim.round bit for bit (NaN payloads included)
with the same stats; the counting by torch operations equals the C++ UnderflowCounter count for count; a
monitor counting through torch operations writes the same reports. No GPU is needed (none is lent to the
test machine): the same functions run on a CUDA tensor's device, and where torch sees a GPU the tests marked
`cuda` run them there too, against mpsim's C++ results on the host."""
import json

import numpy as np
import pytest

import mpsim

torch = pytest.importorskip("torch")
import mpsim.torch as mt  # noqa: E402
from mpsim import _device  # noqa: E402
from mpsim.torch import _device_counts  # noqa: E402
from captured import capture_outputs, numpy_bins  # noqa: E402
from torch import nn  # noqa: E402


def float32_patterns(n=1 << 18, seed=35):
    """n random float32 bit patterns (every exponent, both signs, NaN payloads) and the edges of the cast
    formats: each format's max finite, its overflow midpoint and neighbours, its smallest subnormal and half
    of it, ties at 1, ±0, ±inf, quiet and signalling NaNs of both signs."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    edges = [0.0, 2.0**-149, 2.0**-126, 1.0, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8]
    for f in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        fmt = mpsim.Format(f)
        ulp = 2.0 ** (fmt.emax - fmt.man_bits)
        edges += [fmt.max_finite, fmt.max_finite + ulp / 2, fmt.max_finite + ulp, fmt.min_subnormal,
                  fmt.min_subnormal / 2, 3 * fmt.min_subnormal / 2, fmt.min_normal, fmt.min_normal * (1 - 2.0**-10)]
    with np.errstate(over="ignore"):  # max_finite + ulp of bf16 is beyond float32: inf, an edge too
        e = np.array(edges, np.float32)
    e_bits = np.concatenate([e.view(np.uint32), (e.view(np.uint32) + 1), (e.view(np.uint32) - 1)])
    special = np.array([0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000, 0x7FC01234], np.uint32)
    all_bits = np.concatenate([bits, e_bits, special])
    return np.concatenate([all_bits, all_bits[-(len(e_bits) + len(special)):] | np.uint32(0x80000000)])


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")


# Every float32 pattern: test_exhaustive.py (MPSIM_EXHAUSTIVE_FULL=1); here 2^18 random ones and the edges.
CASES = [("fp16", {}), ("bf16", {}), ("fp8_e5m2", {}), ("fp8_e4m3", {}), ("fp8_e4m3", {"overflow": "saturate"})]


@pytest.mark.parametrize("fmt,options", CASES)
def test_cast_path_equals_mpsim_round(fmt, options):
    bits = float32_patterns()
    x = torch.from_numpy(bits.view(np.float32).copy())
    f = mpsim.Format(fmt).with_options(**{"subnormals": "keep", "overflow": "inf", **options})
    plan = _device.cast_plan(f)
    assert plan is not None, f"{fmt} {options} must take torch's cast"
    got = _device.round_by_cast(x, f, *plan)
    want, want_stats = mpsim.round(x, fmt, stats=True, **options)
    bad = (got.view(torch.int32) != want.view(torch.int32))
    nan_in = int(torch.isnan(x).sum())
    print(f"{f.name} {options or ''} via {plan[0]}: {x.numel()} float32 patterns ({nan_in} NaN), "
          f"{int(bad.sum())} bit mismatches")
    if bad.any():
        i = torch.nonzero(bad)[:5, 0]
        print("  inputs", [hex(int(b)) for b in bits[i.numpy()]], "got", got[i].tolist(), "want", want[i].tolist())
    assert not bad.any()
    got_stats = _device.stats_of(x, got, f)
    assert got_stats == want_stats, (got_stats, want_stats)
    # the whole call a CUDA tensor takes (here on the CPU), out= included
    out = torch.empty_like(x)
    values, st = _device.round_tensor(x, fmt, "rne", out, True, dict(options))
    assert values is out and torch.equal(out.view(torch.int32), want.view(torch.int32)) and st == want_stats


def test_half_inputs_and_other_options_take_the_right_path():
    bits = float32_patterns(1 << 14)
    x = torch.from_numpy(bits.view(np.float32).copy())
    # fp16 / bf16 tensors: widened on the device, rounded by the cast, stored back (every value fits)
    for dtype, fmt in [(torch.float16, "fp8_e5m2"), (torch.bfloat16, "fp8_e4m3"), (torch.bfloat16, "bf16")]:
        h = x.to(dtype)
        got = _device.round_tensor(h, fmt, "rne", None, False, {})
        want = mpsim.round(h, fmt)
        assert got.dtype == dtype and torch.equal(got.view(torch.int16), want.view(torch.int16)), (dtype, fmt)
    # everything else: mpsim's own rounding of a host copy, the same values
    for fmt, mode, options in [("fp16", "sr", {"seed": 3}), ("fp16", "rtz", {}), ("fp16", "rne", {"subnormals": "flush"}),
                               ("e5m3", "rne", {}), ("mxfp8_e4m3", "rne", {}), ("bf16", "rne", {"like": "x86"}),
                               ("fp16", "rne", {"flip": 0.01, "flip_seed": 2})]:
        y = x.reshape(-1, 2) if fmt.startswith("mx") else x
        y = y.nan_to_num(0.0, 0.0, 0.0) if fmt.startswith("mx") else y
        f = None if mpsim.is_block_format(fmt) else mpsim.Format(fmt).with_options(
            subnormals=options.get("subnormals", "keep"))
        assert _device.cast_plan(f, mode, like=options.get("like", "ieee"), flip=options.get("flip", 0.0)) is None
        got = _device.round_tensor(y, fmt, mode, None, False, dict(options))
        assert torch.equal(got.view(torch.int32), mpsim.round(y, fmt, mode, **options).view(torch.int32)), fmt
    assert _device.cast_plan(mpsim.Format("fp16"), dtype=torch.float64) is None  # torch casts doubles via float
    print("cast plans: fp16/bf16/fp8 nearest-even take the cast; sr, rtz, flush, e5m3, mxfp8, like, flip, "
          "float64 the host copy; all equal to mpsim.round")


def test_prepared_rounding_on_device_path():
    """An emulated model's rounding site on a non-CPU tensor: the values and the summed stats of round_into."""
    x = torch.from_numpy(float32_patterns(1 << 16).view(np.float32).copy())
    for fmt, mode in [("bf16", "rne"), ("fp8_e4m3", "rne"), ("fp16", "sr"), ("e4m3", "rtz")]:
        a = mpsim._core.PreparedRounding(fmt, mode, 32, "keep", "inf", "ieee", False)
        b = mpsim._core.PreparedRounding(fmt, mode, 32, "keep", "inf", "ieee", False)
        want = torch.empty_like(x)
        a.round_into(x.numpy(), want.numpy(), 9, 0)
        got = _device.round_prepared(b, x, 9)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), fmt
        assert a.totals() == b.totals(), (fmt, a.totals(), b.totals())
    print("PreparedRounding through the device path: values and totals equal to round_into's")


def tensors_to_count():
    g = torch.Generator().manual_seed(5)
    log_uniform = torch.exp2(torch.empty(20000).uniform_(-160, 140, generator=g)) * torch.where(
        torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)
    raw = torch.from_numpy(float32_patterns(1 << 14).view(np.float32).copy())
    return {"log-uniform": log_uniform, "bit patterns": raw, "float64": log_uniform.double() * 2.0**-900,
            "float64 edges": torch.tensor([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 1.7e308, float("inf"),
                                           float("nan"), 1.0, -3.0], dtype=torch.float64),
            "fp16": log_uniform.clamp(-6e4, 6e4).half(), "bf16": raw.nan_to_num(0.0).bfloat16(),
            "empty": torch.empty(0), "all NaN": torch.full((7,), float("nan")), "zeros": torch.zeros(3, 2),
            "strided": log_uniform.reshape(100, 200).t()}


def canonical(counter):
    """counts_array() with the codes of the ±0, inf and NaN keys summed into code 0: every report ignores them
    (range_counter.cpp, add_counts and histogram), and the C++ counter's own paths place ±0 differently (its
    AVX2 pair loop at the dominant code, its scalar loop at code 0)."""
    v = counter.counts_array().copy()
    offset = 0
    for keys in (280, 2101):  # float, then double table (range_counter.cpp kFloatKeys, kDoubleKeys)
        table = v[offset:offset + 2 * keys * 4].reshape(2, keys, 4)
        for key in (0, keys - 2, keys - 1):
            table[:, key, 0] = table[:, key, :].sum(axis=1)
            table[:, key, 1:] = 0
        offset += 2 * keys * 4
    return v


@pytest.mark.parametrize("mode", ["rne", "rtz", "ru", "rd", "rna"])
def test_torch_op_counting_equals_the_cpp_counter(mode):
    formats = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "float4_e2m1fn", "float8_e8m0fnu", "e3m4",
               mpsim.Format("fp16").with_options(subnormals="flush", overflow="saturate")]
    compared = 0
    for name, t in tensors_to_count().items():
        want = [mpsim.UnderflowCounter(f, mode, moments=False) for f in formats]
        got = [mpsim.UnderflowCounter(f, mode, moments=False) for f in formats]
        mpsim.UnderflowCounter.add_many(want, t)
        _device_counts.count(got, t)
        _device_counts.count(got, t[:0])  # nothing added
        for f, a, b in zip(formats, want, got):
            assert np.array_equal(canonical(a), canonical(b)), (name, f)
            assert a.amax == b.amax and a.amin_nonzero == b.amin_nonzero, (name, f)
            assert a.histogram() == b.histogram() and a.underflow(3) == b.underflow(3)
            compared += 1
    print(f"mode {mode}: {compared} (tensor, format) pairs: counts (±0 / inf / NaN codes summed), amax, amin, "
          f"histograms equal to the C++ counter's")


def test_monitor_counting_through_torch_ops_writes_the_same_reports(tmp_path):
    reports = {}
    for counting in ("auto", "torch"):
        torch.manual_seed(8)
        model = nn.Sequential(nn.Linear(12, 20), nn.Tanh(), nn.Linear(20, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        emulation = mt.emulate(model, "bf16")
        mon = mt.GradientMonitor(model, every=2, out=tmp_path / counting, emulation=emulation, counting=counting,
                                 activations=True)
        for step in range(3):
            loss = model(torch.randn(16, 12) * 2.0**-step).square().mean() * 2.0**-20
            loss.backward()
            mon.step(loss)
            opt.step()
            opt.zero_grad()
        mon.close()
        emulation.remove()
        reports[counting] = mon.summarize()
    assert reports["auto"] == reports["torch"]
    for name in ("steps.csv", "underflow.json"):
        assert (tmp_path / "auto" / name).read_text() == (tmp_path / "torch" / name).read_text(), name
    print("monitor with counting='torch': summary, steps.csv and underflow.json equal to the C++ counting's")
    with pytest.raises(ValueError, match="counting='gpu'"):
        mt.GradientMonitor(nn.Linear(2, 2), counting="gpu")


@CUDA
@pytest.mark.parametrize("fmt,options", CASES + [("fp16", {"subnormals": "flush"}), ("fp8_e4m3", {"mode": "sr"})])
def test_round_on_cuda_equals_the_host(fmt, options):
    options = dict(options)
    mode = options.pop("mode", "rne")
    x = torch.from_numpy(float32_patterns().view(np.float32).copy())
    want, want_stats = mpsim.round(x, fmt, mode, stats=True, **options)
    got, got_stats = mpsim.round(x.cuda(), fmt, mode, stats=True, **options)
    assert got.device.type == "cuda"
    bad = int((got.cpu().view(torch.int32) != want.view(torch.int32)).sum())
    print(f"cuda {fmt} {mode} {options}: {x.numel()} values, {bad} bit mismatches with the host")
    assert bad == 0 and got_stats == want_stats


@CUDA
def test_counting_on_cuda_equals_the_cpp_counter():
    formats = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    for name, t in tensors_to_count().items():
        want = [mpsim.UnderflowCounter(f, "rne", moments=False) for f in formats]
        got = [mpsim.UnderflowCounter(f, "rne", moments=False) for f in formats]
        mpsim.UnderflowCounter.add_many(want, t)
        _device_counts.count(got, t.cuda())
        for f, a, b in zip(formats, want, got):
            assert np.array_equal(canonical(a), canonical(b)), (name, f)
            assert a.amax == b.amax and a.amin_nonzero == b.amin_nonzero, (name, f)
    print(f"cuda counting: {len(tensors_to_count())} tensors x {len(formats)} formats equal to the C++ counter")


@CUDA
def test_prepared_rounding_on_cuda_equals_round_into():
    x = torch.from_numpy(float32_patterns(1 << 16).view(np.float32).copy())
    for fmt, mode in [("bf16", "rne"), ("fp16", "rne"), ("fp8_e4m3", "rne"), ("fp8_e5m2", "rne"), ("fp16", "sr"),
                      ("e4m3", "rtz")]:
        a = mpsim._core.PreparedRounding(fmt, mode, 32, "keep", "inf", "ieee", False)
        b = mpsim._core.PreparedRounding(fmt, mode, 32, "keep", "inf", "ieee", False)
        want = torch.empty_like(x)
        a.round_into(x.numpy(), want.numpy(), 9, 0)
        got = _device.round_prepared(b, x.cuda(), 9)
        assert got.device.type == "cuda", fmt
        assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)), (fmt, mode)
        assert a.totals() == b.totals(), (fmt, mode, a.totals(), b.totals())
    print("PreparedRounding on CUDA tensors: values and totals equal to round_into's on the host (6 cases)")


@CUDA
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_emulated_model_and_monitor_on_cuda(tmp_path, fmt):
    """A model on the GPU under emulate(fmt) with a GradientMonitor: nothing leaves the device that should
    not, the Linear outputs are representable in fmt (the emulation rounded them), and the monitor's
    histograms equal numpy's binning of the tensors captured with plain hooks (copied to the host)."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3)).cuda()
    emulation = mt.emulate(model, fmt)
    monitor = mt.GradientMonitor(model, formats=["fp16", "fp8_e5m2"], every=1, activations=True, out=tmp_path,
                                 emulation=emulation)
    captured = capture_outputs(model, (0, 2, 4))
    x, y = torch.randn(16, 12, device="cuda"), torch.randn(16, 3, device="cuda")
    out = model(x)
    assert out.device.type == "cuda"
    torch.nn.functional.mse_loss(out, y).backward()
    report = monitor.step()
    cast = {"fp16": torch.float16, "bf16": torch.bfloat16}[fmt]
    for i in (0, 2, 4):
        o = captured[f"{i}/out"]
        assert o.device.type == "cuda" and torch.equal(o, o.to(cast).float()), f"layer {i} output not in {fmt}"
    snap = json.loads((tmp_path / "hist" / "step_000001.json").read_text())
    checked = 0
    for kind, key in (("activation_grad", "out_grad"), ("activation", "out")):
        for i in (0, 2, 4):
            got = {n: c for n, c in snap[kind][f"{i}/{key}"]["bins"]}
            assert got == numpy_bins(captured[f"{i}/{key}"]), f"{kind} {i}/{key}"
            checked += sum(got.values())
    for name, p in model.named_parameters():
        assert p.grad.device.type == "cuda", name
        mod, _, leaf = name.rpartition(".")
        got = {n: c for n, c in snap["weight_grad"][f"{mod}/{leaf}_grad"]["bins"]}
        assert got == numpy_bins(p.grad), name
        checked += p.grad.numel()
    monitor.close()
    emulation.remove()
    assert report is not None
    print(f"cuda emulate({fmt}) + monitor: {checked} values binned as numpy bins the captured tensors; "
          f"3 Linear outputs representable in {fmt}")


@CUDA
def test_quantize_on_cuda_is_the_host_rounding_with_a_straight_through_gradient():
    x = torch.from_numpy(float32_patterns(1 << 14).view(np.float32).copy())
    x = x.nan_to_num(0.0, 0.0, 0.0)
    for fmt in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "e3m2"):
        xc = x.cuda().requires_grad_(True)
        q = mt.quantize(xc, fmt)
        assert q.device.type == "cuda"
        want = mpsim.round(x, fmt)
        assert torch.equal(q.detach().cpu().view(torch.int32), want.view(torch.int32)), fmt
        g = torch.linspace(-1, 1, x.numel(), device="cuda")
        q.backward(g)
        assert torch.equal(xc.grad, g), fmt
    print("quantize on CUDA: 5 formats equal to mpsim.round on the host; straight-through gradients")
