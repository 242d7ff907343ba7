"""What mpsim.torch.GradientMonitor costs a CPU training step (docs/torch.md).

  .venv/bin/python scripts/bench_torch_monitor.py [--rounds 15] [--block 20] [--threads 1] [--clock cpu]

Trains small models (a CNN on 16x16 images, batch 64; an MLP 784-512-512-10, batch 128; an LSTM language model,
vocabulary 256, embedding 64, hidden 128, batch 16 x 32 tokens) with SGD, plain
and with a monitor (every format: fp16, bf16, fp8_e4m3, fp8_e5m2; writing steps.csv, hist/ and run.json
into a temporary folder) sampling every 10th step and every step, and with the fp16 emulation hooks; each
monitor (the gradient mass lost in the first format, the default) also with mass=False (none) and mass=True
(every format): what the mass lost costs. The
configurations run in alternating blocks of --block steps, --rounds times, so that a machine's load
changes hit them alike; the table gives each one's median time per step and its ratio to plain. --clock cpu
times the process's CPU time (time.process_time) instead of the wall clock: with one torch thread on a machine
whose cores other jobs share, it counts the work done and not the waiting.
"""
import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

import mpsim.torch as mt


def cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 4))


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


class LstmLm(nn.Module):
    """A word-level LSTM language model in the simulator's lstm_lm's shape (lib/mpsim/models/lstm_lm.hpp):
    embedding, one LSTM layer, a linear decoder over the vocabulary; tokens (batch, time) -> logits per step."""

    def __init__(self, vocab=256, embed=64, hidden=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.decoder(h).reshape(-1, self.decoder.out_features)


MODELS = {"cnn 16x16, batch 64": (cnn, (64, 1, 16, 16), 4), "mlp 784-512-512-10, batch 128": (mlp, (128, 784), 10),
          "lstm lm 256-64-128, batch 16 x 32 steps": (LstmLm, (16, 32), 256)}


class Run:
    def __init__(self, make, shape, classes, monitor_every=None, emulate=False, out=None, mass=None):
        torch.manual_seed(0)
        self.model = make()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.monitor = (mt.GradientMonitor(self.model, every=monitor_every, out=out, mass=mass)
                        if monitor_every else None)
        self.emulation = mt.emulate(self.model, "fp16") if emulate else None
        g = torch.Generator().manual_seed(1)
        if isinstance(self.model, LstmLm):  # tokens in, the next token of every position as the target
            self.x = torch.randint(0, classes, shape, generator=g)
            self.y = torch.randint(0, classes, (shape[0] * shape[1],), generator=g)
        else:
            self.x = torch.randn(*shape, generator=g)
            self.y = torch.randint(0, classes, (shape[0],), generator=g)

    clock = time.perf_counter

    def steps(self, n):
        t0 = self.clock()
        for _ in range(n):
            loss = F.cross_entropy(self.model(self.x), self.y)
            loss.backward()
            if self.monitor:
                self.monitor.step(loss)
            self.opt.step()
            self.opt.zero_grad()
        return (self.clock() - t0) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=20, help="steps per block (a multiple of 10)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter; cpu: the process's CPU time (time.process_time)")
    ap.add_argument("--models", default=None, help="comma-separated name prefixes (cnn,mlp,lstm); default all")
    args = ap.parse_args()
    Run.clock = staticmethod(time.process_time if args.clock == "cpu" else time.perf_counter)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds of {args.block} steps each, "
          f"{args.clock} clock")
    for name, (make, shape, classes) in MODELS.items():
        if args.models and not any(name.startswith(m) for m in args.models.split(",")):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            runs = {"plain": Run(make, shape, classes),
                    "monitor every 10 steps": Run(make, shape, classes, monitor_every=10, out=f"{tmp}/m10"),
                    "  mass=False": Run(make, shape, classes, monitor_every=10, out=f"{tmp}/n10", mass=False),
                    "  mass=True": Run(make, shape, classes, monitor_every=10, out=f"{tmp}/a10", mass=True),
                    "monitor every step": Run(make, shape, classes, monitor_every=1, out=f"{tmp}/m1"),
                    "  mass=False ": Run(make, shape, classes, monitor_every=1, out=f"{tmp}/n1", mass=False),
                    "  mass=True ": Run(make, shape, classes, monitor_every=1, out=f"{tmp}/a1", mass=True),
                    "fp16 emulation hooks": Run(make, shape, classes, emulate=True)}
            times = {k: [] for k in runs}
            for r in runs.values():
                r.steps(10)  # warm-up
            for _ in range(args.rounds):
                for k, r in runs.items():
                    times[k].append(r.steps(args.block))
        base = statistics.median(times["plain"])
        print(f"\n{name}")
        print(f"{'configuration':<26} {'ms/step (median)':>17} {'vs plain':>9}")
        for k, ts in times.items():
            m = statistics.median(ts)
            print(f"{k:<26} {1e3 * m:>17.3f} {m / base:>8.3f}x")


if __name__ == "__main__":
    main()
