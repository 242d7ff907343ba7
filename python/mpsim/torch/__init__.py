"""mpsim inside PyTorch training (docs/torch.md).

  GradientMonitor  per-layer activation / weight gradient telemetry in fp16, bf16, fp8: underflow,
                   subnormal and overflow shares at the current loss scale, the safe scale window, log2
                   histograms; steps.csv and hist/*.json in the schemas `mpsim train` writes
  emulate          run an fp32 model as if under torch.autocast in a chosen format and rounding mode
                   (mpsim.round at every cast autocast would make, forward and backward)
  GradientMonitor.all_reduce  merge the counts of every torch.distributed rank
  quantize         mpsim.round as a differentiable op (straight-through by default) for quantization-aware
                   training

Tensors on any device (float32 / float64; the monitor widens fp16 / bf16 exactly): counted by torch
operations on their device, rounded by torch's casts where exact, else through a host copy (docs/torch.md).
"""
from .emulate import Emulation, NotEmulatedWarning, RoundingSite, emulate
from .monitor import DEFAULT_FORMATS, GradientMonitor
from .quantize import quantize

__all__ = ["DEFAULT_FORMATS", "Emulation", "GradientMonitor", "NotEmulatedWarning", "RoundingSite", "emulate",
           "quantize"]
