"""What the op-level emulate() costs against the module-hook emulation it replaced (docs/torch.md#cost).

  .venv/bin/python scripts/bench_torch_emulate_ops.py [--rounds 11] [--block 10] [--threads 1]
                                                     [--clock cpu] [--hooks-from 00dc8e2]

Trains, on the models both cover (and a transformer layer, which the module-hook emulation covers only in
part), SGD steps (forward, backward, update; one torch thread): the CNN and the
MLP of scripts/bench_torch_monitor.py and the LSTM language-model shape of scripts/bench_torch_emulate_lstm.py,
plain fp32, under the module-hook emulate("fp16") (python/mpsim/torch/emulate.py as of --hooks-from, read
with `git show` and loaded beside the current module) and under the op-level emulate("fp16"). The three run
in alternating blocks of --block steps in one process, --rounds times, so that a machine's load changes hit
them alike; the table gives each one's median time per step, its ratio to plain and op-level / hooks.
Both emulations round the same values at these models' sites (checked: equal outputs and gradients).
"""
import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import mpsim.torch as mt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_monitor import cnn, mlp  # noqa: E402


def load_hooks_emulate(rev):
    """The module-hook emulate.py of git revision `rev`, as the module mpsim.torch._emulate_hooks."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = subprocess.run(["git", "-C", root, "show", f"{rev}:python/mpsim/torch/emulate.py"], check=True,
                         capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("mpsim.torch._emulate_hooks", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "mpsim.torch"
    exec(compile(src, f"{rev}:python/mpsim/torch/emulate.py", "exec"), module.__dict__)
    return module


class LstmLm(nn.Module):
    """scripts/bench_torch_emulate_lstm.py's shape: 32 steps, batch 16, 32 -> 64, then a Linear to 32."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 64)
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return self.fc(self.lstm(x)[0])


def transformer():
    """One post-norm encoder layer, d_model 64, 4 heads, MLP 256 (the module-hook emulation rounds only its
    linear1 and linear2: the attention's products are not modules and out_proj is never called)."""
    return nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)


MODELS = {"cnn 16x16, batch 64": (cnn, (64, 1, 16, 16), 4), "mlp 784-512-512-10, batch 128": (mlp, (128, 784), 10),
          "lstm 32 steps x 16, 32->64": (LstmLm, (32, 16, 32), None),
          "transformer layer 64/4 heads, 32 tokens x 16 (hooks: linear1, linear2 only)":
              (transformer, (16, 32, 64), None)}


class Run:
    clock = time.perf_counter

    def __init__(self, make, shape, classes, emulate=None):
        torch.manual_seed(0)
        self.model = make()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.emulation = emulate(self.model, "fp16") if emulate else None
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(*shape, generator=g)
        self.y = torch.randint(0, classes, (shape[0],), generator=g) if classes else None

    def loss(self):
        out = self.model(self.x)
        return F.cross_entropy(out, self.y) if self.y is not None else out.square().mean()

    def steps(self, n):
        t0 = self.clock()
        for _ in range(n):
            self.loss().backward()
            self.opt.step()
            self.opt.zero_grad()
        return (self.clock() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--hooks-from", default="00dc8e2", help="git revision of the module-hook emulate.py")
    args = ap.parse_args()
    Run.clock = staticmethod(time.process_time if args.clock == "cpu" else time.perf_counter)
    torch.set_num_threads(args.threads)
    hooks = load_hooks_emulate(args.hooks_from)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds of {args.block} steps, "
          f"{args.clock} clock; hooks: emulate.py of {args.hooks_from}")
    for name, (make, shape, classes) in MODELS.items():
        runs = {"plain": Run(make, shape, classes), "hooks fp16": Run(make, shape, classes, hooks.emulate),
                "op-level fp16": Run(make, shape, classes, mt.emulate)}
        # The same numbers: one step's loss and gradients under both emulations, before timing.
        a, b = runs["hooks fp16"], runs["op-level fp16"]
        la, lb = a.loss(), b.loss()
        la.backward()
        lb.backward()
        same = torch.equal(la, lb) and all(torch.equal(p.grad, q.grad) for p, q in
                                           zip(a.model.parameters(), b.model.parameters()))
        a.opt.zero_grad()
        b.opt.zero_grad()
        times = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, r in runs.items():
                times[k].append(r.steps(args.block))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name}: hooks and op-level equal loss and gradients: {same}")  # False for the transformer
        for k, m in med.items():
            print(f"  {k:16s} {m * 1e3:8.2f} ms/step  {m / med['plain']:6.2f}x plain")
        print(f"  op-level / hooks: {med['op-level fp16'] / med['hooks fp16']:.3f}")


if __name__ == "__main__":
    main()
