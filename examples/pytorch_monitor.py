"""mpsim in a PyTorch training loop (README, "Using mpsim from PyTorch"): fp16 emulated with mpsim's rounding,
the real GradScaler, and per-layer gradient telemetry written in the files `mpsim train` writes.

    .venv/bin/python examples/pytorch_monitor.py [OUT_DIR]      (default out/pytorch_monitor)
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

import mpsim.torch as mt

out = sys.argv[1] if len(sys.argv) > 1 else "out/pytorch_monitor"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")

emulation = mt.emulate(model, "fp16")  # Linear inputs, weights, outputs and their gradients rounded to fp16
monitor = mt.GradientMonitor(model, formats=["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"], every=10,
                             scaler=scaler, emulation=emulation, out=out)
for step in range(1, 51):
    x = torch.randn(128, 32)
    loss = F.cross_entropy(model(x), (x[:, :4].argmax(1)))
    scaler.scale(loss).backward()
    report = monitor.step(loss)  # a dict on sampled steps (1, 11, 21, ...), None on the others
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    if report:
        act = report["formats"]["fp16"]["activation_grad"]
        print(f"step {step:2d}, loss scale {report['loss_scale']:g}: fp16 flushes {100 * act['total']['zero']:.3f}% "
              f"of the activation gradients, leaves {100 * act['total']['subnormal']:.2f}% subnormal")
for fmt, kinds in monitor.last["formats"].items():  # the last sampled step, every format
    act = kinds["activation_grad"]
    window = "none" if act["window"] is None else "2^{:g}..2^{:g}".format(*act["window"])
    print(f"{fmt:9s} flushed {100 * act['total']['zero']:7.3f}%  overflow {100 * act['total']['overflow']:.3f}%  "
          f"loss scales with no overflow and least underflow: {window}")
monitor.close()  # steps.csv, hist/step_*.json, run.json, underflow.json
emulation.remove()
print(f"wrote {out}/steps.csv, hist/, run.json, underflow.json; the emulation's rounding sites: "
      f"{sorted(emulation.stats())[:3]} ...")
