"""What mpsim.torch.emulate costs an LSTM's training step (docs/torch.md, "LSTM and LSTMCell").

  .venv/bin/python scripts/bench_torch_emulate_lstm.py [--rounds 11] [--block 10] [--threads 1]

Forward and backward of the simulator's language-model shape (lib/mpsim/models/lstm_lm.cpp: 32 time steps,
batch 16, input 32, hidden 64, then a Linear to 32 outputs) with torch.nn.LSTM: plain (torch's fused LSTM),
under emulate("fp16"), and unrolled by the emulation with every rounding replaced by a copy (what the Python
loop over time steps costs without mpsim.round). The configurations run in alternating blocks of --block
steps, --rounds times, so that a machine's load changes hit them alike; the table gives each one's median
time per step and its ratio to plain.
"""
import argparse
import statistics
import time

import torch
from torch import nn

import mpsim.torch as mt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.ModuleDict({"lstm": nn.LSTM(32, 64), "fc": nn.Linear(64, 32)})
    x = torch.randn(32, 16, 32, requires_grad=True)

    def block():
        start = time.perf_counter()
        for _ in range(args.block):
            out, _ = model["lstm"](x)
            model["fc"](out).square().mean().backward()
        return (time.perf_counter() - start) / args.block

    rounding = mt.RoundingSite.__call__
    times = {"plain nn.LSTM": [], "emulate fp16": [], "unrolled, no rounding": []}
    for _ in range(args.rounds):
        times["plain nn.LSTM"].append(block())
        with mt.emulate(model, "fp16"):
            times["emulate fp16"].append(block())
            mt.RoundingSite.__call__ = lambda site, t: t.clone()
            try:
                times["unrolled, no rounding"].append(block())
            finally:
                mt.RoundingSite.__call__ = rounding
    plain = statistics.median(times["plain nn.LSTM"])
    print(f"LSTM 32 steps x batch 16, 32 -> 64, + Linear 64 -> 32; {args.rounds} rounds of {args.block} steps, "
          f"{args.threads} thread(s)")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:24s} {m * 1e3:8.2f} ms/step  {m / plain:6.2f}x")


if __name__ == "__main__":
    main()
