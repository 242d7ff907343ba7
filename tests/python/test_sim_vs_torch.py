"""The simulator's hand-written forward and backward passes checked against PyTorch autograd.

For each model (ssd, lstm) the C++ side runs one training step with every rounding site recorded
(build/tests/models/mpsim_layer_dump, lib/mpsim/models/layer_dump.hpp); the PyTorch mirrors of the models
(tests/python/torch_models.py) load the same weights and the same batch and run the same step with autograd.

fp32 (policy fp32): every site the simulator has (forward: each GEMM/convolution's input, weight copy and
output; backward: the loss gradient entering the network, every activation gradient, every weight and bias
gradient; the LSTM's per-time-step sites row by row) and every parameter gradient buffer is compared, tensor
by tensor, with PyTorch's fp32 result: the worst difference is printed and must satisfy
    max_i |cpp_i - torch_i| <= RTOL * max_i |torch_i|,
and the values that are exactly zero (ReLU and max-pooling masks, boxes outside the loss) must be the same.
Why RTOL = 1e-4: the two sides add the same fp32 products in different orders (Eigen's blocked GEMM against
PyTorch's oneDNN/MKL kernels; im2col + GEMM against a direct convolution). Reordering a sum of K terms moves it
by at most about K u sum|terms| (u = 2^-24, Higham, Accuracy and Stability, thm 3.1), typically sqrt(K) u;
the longest sums here have K <= 8 * 32 * 32 = 8192 terms (conv1's weight gradient at batch 8), and the
backward chain compounds about ten of them, which puts the typical normwise difference near 1e-6 and leaves
RTOL two orders of magnitude above it. The same step in float64 PyTorch is printed beside it: the C++ error
against float64 is of the order of PyTorch's own fp32 error (docs/validation.md has the table).
The unrolled LSTM of the mirror is itself checked against torch.nn.LSTM (float64, to 1e-10).

mixed-fp16 (the policy's rounding at the same sites in PyTorch, with torch's own float -> half conversion,
round to nearest even), the per-site counts of one step as the simulator reports them (its bulk engine's
Stats), three ways:
  1. each site's own values: torch's cast of the values the simulator had before rounding must give its
     rounded values bit for bit, and PyTorch's counts (count, zero_in, exact, rounded, underflow, subnormal,
     overflow) must equal the simulator's exactly, and so must the per-site shares `mpsim train` writes to
     steps.csv for the same step (its first);
  2. free running, each side rounding its own values through the whole step: underflow, subnormal and
     overflow per site must agree within 1 + 3 sqrt(N) (N the larger count). They cannot agree exactly: the
     fp32 values before rounding differ in their last bits (the summation order above), a few of them then
     round to neighbouring fp16 values, and from there on the two runs differ by fp16 ulps (the "same fp16
     values" column falls from 1 in the first layers to about 0.7 in the last weight gradients), so each
     value close to a class boundary (2^-25, 2^-14, 65520) lands on either side independently of the other
     run: the count is re-drawn, and a count of N such events varies by about sqrt(N) (three standard
     deviations allowed). A site placed or ordered differently from PyTorch's shifts a count by a fraction of
     itself, beyond the allowance once the count is large: hence also the runs at loss scales below 1, where
     thousands of values underflow;
  3. where the Python module mpsim is built: the PyTorch step again with mpsim.round at its sites instead of
     torch's cast must give the same values and counts exactly.
The same three checks run under mixed-bf16 (torch.bfloat16's cast) at batch 2.

Every check runs at batch 2 and at the models' default batches (ssd 8, lstm 16): about 10 s in all.
Runs under pytest, or as a script (python test_sim_vs_torch.py) printing the same lines.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_main import require_torch, run_tests  # noqa: E402

torch = require_torch(__name__)
import torch_models as tm  # noqa: E402

RTOL = 1e-4
SEED, BATCH_INDEX = 1, 0
BATCHES = (2, None)  # None: the model's default batch (ssd 8, lstm 16)
LSTM_HIDDEN = 64  # lstm_lm.cpp's default size


def layer_dump_exe():
    """$MPSIM_LAYER_DUMP, or mpsim_layer_dump in the build tree of $MPSIM_BIN (build/tools/mpsim)."""
    exe = os.environ.get("MPSIM_LAYER_DUMP")
    if not exe and os.environ.get("MPSIM_BIN"):
        exe = os.path.join(os.path.dirname(os.environ["MPSIM_BIN"]), "..", "tests", "models", "mpsim_layer_dump")
    assert exe and os.path.exists(exe), "set MPSIM_BIN (build/tools/mpsim) or MPSIM_LAYER_DUMP to find mpsim_layer_dump"
    return exe


def dump(model, policy, batch, loss_scale=1.0):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.safetensors")
        args = [layer_dump_exe(), "--model", model, "--policy", policy, "--seed", str(SEED),
                "--batch-index", str(BATCH_INDEX), "--loss-scale", repr(loss_scale), "--out", path]
        if batch:
            args += ["--batch", str(batch)]
        r = subprocess.run(args, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(args)} failed ({r.returncode}): {r.stderr}"
        return tm.load_dump(path)


def call_order(meta, site):
    """The indices (time steps) of a site's rows in the simulator's call order."""
    cls = {s["name"]: s for s in meta["sites"]}[site]
    n = cls["calls"]
    backward = cls["class"] in (tm.ACTIVATION_GRAD, tm.WEIGHT_GRAD)
    return list(reversed(range(n))) if (backward and n > 1) else list(range(n))


class Table:
    """Per-tensor comparisons, printed as llm.c's test_gpt2 prints them; collects the failures."""

    def __init__(self, title):
        self.title, self.rows, self.failures = title, [], []
        print(f"\n{title}")
        print(f"  {'tensor':26s} {'values':>8s} {'max|torch|':>11s} {'max|c++-torch|':>14s} {'rel':>9s} "
              f"{'c++ vs f64':>10s} {'torch vs f64':>12s} {'zeros apart':>11s}")

    def compare(self, name, cpp, ref, ref64=None, rtol=RTOL):
        cpp = np.asarray(cpp, dtype=np.float64).reshape(-1)
        ref = np.asarray(ref, dtype=np.float64).reshape(-1)
        if cpp.shape != ref.shape:
            self.failures.append(f"{name}: {cpp.size} values in C++, {ref.size} in PyTorch")
            print(f"  {name:26s} SHAPE MISMATCH {cpp.size} / {ref.size}")
            return
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        diff = float(np.abs(cpp - ref).max()) if ref.size else 0.0
        rel = diff / scale if scale > 0 else diff
        e64 = t64 = float("nan")
        if ref64 is not None:
            r64 = np.asarray(ref64, dtype=np.float64).reshape(-1)
            s64 = max(float(np.abs(r64).max()), 1e-300)
            e64, t64 = float(np.abs(cpp - r64).max()) / s64, float(np.abs(ref - r64).max()) / s64
        # Exact zeros are structure (ReLU and max-pooling masks, boxes outside the loss, padding): both sides
        # must have them at the same places; a routing error hides in a normwise difference, not here.
        zeros_apart = int(np.sum((cpp == 0) != (ref == 0)))
        ok = np.isfinite(cpp).all() and rel <= rtol and zeros_apart == 0
        self.rows.append((name, cpp.size, scale, diff, rel, e64, t64))
        print(f"  {name:26s} {cpp.size:8d} {scale:11.3e} {diff:14.3e} {rel:9.2e} {e64:10.2e} {t64:12.2e} "
              f"{zeros_apart:11d}{'' if ok else '  FAIL'}")
        if not ok:
            self.failures.append(f"{name}: max|c++ - torch| / max|torch| = {rel:.3e} (tolerance {rtol:g}), "
                                 f"{zeros_apart} values zero on one side only")

    def done(self):
        worst = max(self.rows, key=lambda r: r[4])
        print(f"  {len(self.rows)} tensors, {sum(r[1] for r in self.rows)} values compared, "
              f"worst {worst[0]} at {worst[4]:.2e} (tolerance {RTOL:g}), {len(self.failures)} failures")
        assert not self.failures, "; ".join(self.failures)


def compare_sites(table, meta, tensors, sites32, sites64):
    cpp_sites = [s["name"] for s in meta["sites"]]
    missing = sorted(set(cpp_sites) ^ set(sites32.values))
    assert not missing, f"sites only one side has: {missing}"
    for site in cpp_sites:
        order = call_order(meta, site)
        table.compare(f"site {site}", tensors[f"site/{site}"], sites32.stacked(site, order),
                      sites64.stacked(site, order))


def compare_step(title, meta, tensors, run32, run64):
    """The loss, every site and every gradient buffer of the C++ step against PyTorch's fp32 (loss, Sites, model)
    and, for the last columns, float64 run."""
    (loss32, s32, m32), (loss64, s64, m64) = run32, run64
    table = Table(f"{title}, fp32: C++ against PyTorch autograd")
    table.compare("loss", [meta["loss"]], [loss32], [loss64])
    compare_sites(table, meta, tensors, s32, s64)
    g32, g64 = m32.grads(), m64.grads()
    for name in g32:
        table.compare(f"grad {name}", tensors[f"grad/{name}"], g32[name], g64[name])
    table.done()


def ssd_step(meta, tensors, dtype, sites, loss_scale=1.0):
    model = tm.SsdLite(tensors, dtype)
    loss, pos, neg = model.step(tensors["batch/images"], meta["truths"], sites, loss_scale)
    return model, loss, pos, neg


def lstm_step(meta, tensors, dtype, sites, loss_scale=1.0):
    model = tm.LstmLm(tensors, LSTM_HIDDEN, dtype)
    loss = model.step(meta["inputs"], meta["targets"], sites, loss_scale)
    return model, loss


def check_ssd_fp32(batch):
    meta, tensors = dump("ssd", "fp32", batch)
    B = meta["batch"]
    # The batch the dump regenerated is the one the step used: the first convolution's input.
    assert np.array_equal(tensors["site/conv1/in"].reshape(-1), tensors["batch/images"].reshape(-1))
    s32, s64 = tm.Sites(), tm.Sites()
    m32, loss32, pos, neg = ssd_step(meta, tensors, torch.float32, s32)
    m64, loss64, pos64, neg64 = ssd_step(meta, tensors, torch.float64, s64)
    # Matching and hard-negative mining are discrete: the same boxes on every side. The C++ side's choice
    # shows in its loss gradient: a box takes part iff its row of d(conf) is non-zero.
    dconf = []
    for head, f in (("head1", 8), ("head2", 4)):
        g = tensors[f"site/{head}/out_grad"].reshape(B, 24, f, f).transpose(0, 2, 3, 1)[..., 12:]
        dconf.append(np.abs(g.reshape(B, -1, 4)).sum(axis=2) > 0)
    cpp_used = np.concatenate(dconf, axis=1)
    print(f"\nssd, batch {B}: {int(pos.sum())} matched boxes, {int(neg.sum())} mined negatives; "
          f"boxes in the loss: C++ {int(cpp_used.sum())}, PyTorch {int((pos | neg).sum())}")
    assert np.array_equal(cpp_used, (pos | neg).numpy()), "the C++ and PyTorch losses use different boxes"
    assert torch.equal(pos, pos64) and torch.equal(neg, neg64)
    compare_step(f"ssd (batch {B}, width 16, seed {SEED})", meta, tensors, (loss32, s32, m32), (loss64, s64, m64))


def check_lstm_fp32(batch):
    meta, tensors = dump("lstm", "fp32", batch)
    emb = tensors["param/embed/weight"].reshape(-1, 32)
    inputs = np.asarray(meta["inputs"])
    assert np.array_equal(tensors["site/lstm/in"].reshape(-1, 32), emb[inputs.reshape(-1)])
    s32, s64 = tm.Sites(), tm.Sites()
    m32, loss32 = lstm_step(meta, tensors, torch.float32, s32)
    m64, loss64 = lstm_step(meta, tensors, torch.float64, s64)
    B = meta["batch"]
    compare_step(f"lstm (batch {B}, hidden {LSTM_HIDDEN}, 32 steps, seed {SEED})", meta, tensors, (loss32, s32, m32),
                 (loss64, s64, m64))
    # The unrolled cell against PyTorch's own LSTM, both float64.
    g64 = m64.grads()
    ref_loss, ref_h, ref_g = tm.lstm_lm_with_torch_lstm(tensors, LSTM_HIDDEN, meta["inputs"], meta["targets"])
    worst = abs(ref_loss - loss64) / abs(ref_loss)
    worst = max(worst, float((ref_h - m64.hidden_states).abs().max() / ref_h.abs().max()))
    for name, g in ref_g.items():
        worst = max(worst, float(np.abs(g - g64[name]).max() / np.abs(g).max()))
    print(f"  unrolled LSTM against torch.nn.LSTM (float64): loss, hidden states and {len(ref_g)} gradients, "
          f"worst relative difference {worst:.2e}")
    assert worst < 1e-10


STAT_KEYS = ("count", "zero_in", "exact", "rounded", "underflow", "subnormal", "overflow")
DUMP_NAMES = {"overflow": "overflow_num"}  # torch_models' name -> the dump's (`mpsim round --stats-json`'s)
SHOWN_KEYS = ("underflow", "subnormal", "overflow")


def trainer_site_shares(model, batch, loss_scale):
    """Step 1 of `mpsim train` (the same model, seed, batch and loss scale as the dump's step): its steps.csv
    columns SITE:zero, SITE:subnormal, SITE:overflow (shares of the site's non-zero values) as text."""
    scaler = "none" if loss_scale == 1.0 else f"static:{loss_scale!r}"
    with tempfile.TemporaryDirectory() as tmp:
        args = [os.environ["MPSIM_BIN"], "train", "--model", model, "--policy", "mixed-fp16", "--steps", "1",
                "--seed", str(SEED), "--scaler", scaler, "--out", os.path.join(tmp, "run")]
        if batch:
            args += ["--batch", str(batch)]
        r = subprocess.run(args, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(args)} failed ({r.returncode}): {r.stderr}"
        with open(os.path.join(tmp, "run", "steps.csv")) as f:
            header, row = f.readline().strip().split(","), f.readline().strip().split(",")
    return {k: v for k, v in zip(header, row) if k.endswith((":zero", ":subnormal", ":overflow"))}


def import_mpsim():
    """The Python module mpsim (python/), or None where it is not built."""
    try:
        import mpsim
    except ImportError:
        return None
    return mpsim


def count_allowance(a, b):
    """How far the free-running counts of one site may differ: 1 + 3 sqrt(the larger) (see the module text)."""
    return 1 + 3 * max(a, b) ** 0.5


# The mixed policies: the format's name in mpsim, its torch dtype, its smallest normal (IEEE 754 binary16;
# bfloat16 has float32's exponent range).
LOW_FORMATS = {"fp16": (torch.float16, 2.0 ** -14), "bf16": (torch.bfloat16, 2.0 ** -126)}


def check_site_counts(model, batch, loss_scale=1.0, fmt="fp16"):
    dtype, min_normal = LOW_FORMATS[fmt]

    def cast(x):  # torch's own conversion (round to nearest even, subnormals kept, overflow to inf), back
        return x.to(dtype).to(x.dtype)

    meta, tensors = dump(model, f"mixed-{fmt}", batch, loss_scale)
    cpp = meta["site_stats"]
    site_order = [s["name"] for s in meta["sites"] if s["name"] in cpp]
    classes = {s["name"]: s["class"] for s in meta["sites"]}
    # 1. Each site's own values: torch's fp16 cast of the simulator's values before rounding must give the
    #    simulator's rounded values bit for bit, and PyTorch's counts of them the simulator's counts exactly.
    forced = tm.Sites(rounds=tm.MIXED_CLASSES, round_fn=cast, min_normal=min_normal, record=False)
    exact_failures, values = [], 0
    for site in site_order:
        before = torch.from_numpy(tensors[f"site/{site}"].reshape(-1).copy())
        rounded = forced.apply(site, classes[site], 0, before).numpy()
        values += before.numel()
        if rounded.tobytes() != tensors[f"rounded/{site}"].reshape(-1).tobytes():
            exact_failures.append(f"{site}: rounded values differ")
        for k in STAT_KEYS:
            ours = cpp[site][DUMP_NAMES.get(k, k)]
            if ours != forced.stats[site][k]:
                exact_failures.append(f"{site} {k}: simulator {ours}, PyTorch {forced.stats[site][k]}")
    print(f"\n{model} (batch {meta['batch']}), mixed-{fmt}, loss scale {loss_scale:g}: {len(site_order)} rounding sites, "
          f"{values} values; torch's {fmt} cast of the simulator's own values at each site: "
          f"{len(exact_failures)} differences in the rounded bits and the counts {', '.join(STAT_KEYS)}")
    assert not exact_failures, "; ".join(exact_failures)
    if fmt == "fp16" and BATCH_INDEX == 0:
        # What the training loop reports of the same step (steps.csv) is these counts.
        shares = trainer_site_shares(model, batch, loss_scale)
        names = {"zero": "underflow", "subnormal": "subnormal", "overflow": "overflow_num"}
        differ = []
        for column, text in shares.items():
            site, kind = column.rsplit(":", 1)
            st = cpp[site]
            nonzero = st["exact"] + st["rounded"]
            want = f"{st[names[kind]] / nonzero:.6g}" if nonzero else "0"  # trainer.cpp fraction()
            if text != want:
                differ.append(f"{column}: steps.csv {text}, the dump's counts {want}")
        print(f"  mpsim train, step 1 of the same run: {len(shares)} per-site shares in steps.csv, "
              f"{len(differ)} differ from the dump's counts")
        assert not differ, "; ".join(differ)

    # 2. Free running: the PyTorch mirror rounds its own values at the same sites.
    sites = tm.Sites(rounds=tm.MIXED_CLASSES, round_fn=cast, min_normal=min_normal)
    step = ssd_step if model == "ssd" else lstm_step
    step(meta, tensors, torch.float32, sites, loss_scale)
    assert sorted(cpp) == sorted(sites.stats), f"rounded sites differ: {sorted(set(cpp) ^ set(sites.stats))}"
    print("  free running (each side rounds its own values), simulator / PyTorch:")
    print(f"  {'site':18s} {'class':15s} {'values':>7s} " + " ".join(f"{k:>17s}" for k in SHOWN_KEYS) +
          f" {'same ' + fmt + ' values':>17s}")
    failures, differing, totals = [], 0, {k: [0, 0] for k in SHOWN_KEYS}
    for site in site_order:
        order = call_order(meta, site)
        ours = tensors[f"rounded/{site}"].reshape(-1)
        theirs = np.concatenate([cast(sites.values[site][i]).float().reshape(-1).numpy() for i in order])
        cells = []
        for k in SHOWN_KEYS:
            a, b = cpp[site][DUMP_NAMES.get(k, k)], sites.stats[site][k]
            totals[k][0] += a
            totals[k][1] += b
            differing += a != b
            cells.append(f"{a:>8d} / {b:<6d}")
            if abs(a - b) > count_allowance(a, b):
                failures.append(f"{site} {k}: simulator {a}, PyTorch {b}")
        print(f"  {site:18s} {classes[site]:15s} {cpp[site]['count']:7d} " + " ".join(cells) +
              f" {float(np.mean(ours == theirs)):17.4f}")
    print("  totals: " + ", ".join(f"{k} {a} / {b}" for k, (a, b) in totals.items()) +
          f"; {differing} of {len(site_order) * len(SHOWN_KEYS)} counts differ, {len(failures)} beyond 1 + 3 sqrt(count)")
    assert not failures, "; ".join(failures)

    # 3. The same PyTorch step with mpsim's own rounding at the sites (the Python module, mpsim.round on the
    #    tensors): the bulk engine and torch's cast round alike (1.), so the step must be the same bit for bit.
    mpsim = import_mpsim()
    if mpsim is None:
        print("  mpsim.round at the sites: skipped (the Python module mpsim is not importable)")
        return
    hooked = tm.Sites(rounds=tm.MIXED_CLASSES, round_fn=lambda x: mpsim.round(x.contiguous(), fmt),
                      min_normal=min_normal)
    step(meta, tensors, torch.float32, hooked, loss_scale)
    same_values = all(torch.equal(hooked.values[site][i], sites.values[site][i])
                      for site in sites.values for i in sites.values[site])
    print(f"  mpsim.round at the same sites of the PyTorch step: counts {'equal' if hooked.stats == sites.stats else 'DIFFER'}"
          f" and values before rounding {'equal' if same_values else 'DIFFER'} to those with torch's cast, all sites")
    assert hooked.stats == sites.stats and same_values


def test_layer_dump_bad_input():
    """Bad options exit 2 with a message naming them, and leave no file."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "dump.safetensors")
        cases = [(["--model", "gpt"], "'gpt'"), (["--model", "lstm", "--policy", "mixed-fp17"], "mixed-fp17"),
                 (["--model", "ssd", "--batch", "-1"], "batch"), (["--model", "ssd", "--loss-scale", "nan"], "loss scale")]
        for args, want in cases:
            r = subprocess.run([layer_dump_exe()] + args + ["--out", out], capture_output=True, text=True)
            print(f"mpsim_layer_dump {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
            assert r.returncode == 2 and want in r.stderr and not os.path.exists(out)


def test_ssd_fp32():
    for b in BATCHES:
        check_ssd_fp32(b)


def test_lstm_fp32():
    for b in BATCHES:
        check_lstm_fp32(b)


# Loss scale 1 (the models' own gradients: few underflow); a loss scale below 1 standing for
# `--loss-divisor-log2` (lib/mpsim/models/README.md: gradients 2^16 / 2^10 times smaller, where fp16 flushes
# most of them), so that the underflow counts are large; and one beyond the overflow edge the study found
# (ssd from 2^16, lstm from 2^20: the weight gradients overflow).
SCALES = {"ssd": (1.0, 2.0 ** -16, 2.0 ** 17), "lstm": (1.0, 2.0 ** -10, 2.0 ** 21)}


def test_ssd_mixed_fp16_site_counts():
    for b in BATCHES:
        for scale in SCALES["ssd"]:
            check_site_counts("ssd", b, scale)


def test_lstm_mixed_fp16_site_counts():
    for b in BATCHES:
        for scale in SCALES["lstm"]:
            check_site_counts("lstm", b, scale)


def test_mixed_bf16_site_counts():
    for model in ("ssd", "lstm"):
        check_site_counts(model, 2, 1.0, "bf16")


if __name__ == "__main__":
    run_tests(globals())
