"""Emulation hooks: an fp32 model run as if under torch.autocast in a chosen format, with mpsim's rounding.

What torch.autocast does to a Linear or a convolution in fp16 (and what the simulator's mixed policies do,
DESIGN.md): the input, the weight and the bias are cast to fp16, the product accumulates in fp32 and the
output is rounded to fp16; in backward every gradient that passes one of those casts is rounded into the
low format too (the output's gradient arrives in fp16 because the output is an fp16 tensor; the input's and
the weight's gradients are fp16 results of fp16 GEMMs, cast back to fp32 for the master weights). Here each
of those casts is one rounding with mpsim.round (any format, any mode, stochastic included) around the
module's own fp32 computation, so real autograd, real optimisers and the real torch.amp.GradScaler run on
the emulated numbers. Other operations (activations, softmax, losses) run in fp32, as autocast runs them.

    emulation = mpsim.torch.emulate(model, "fp16")           # every Linear / Conv1d / Conv2d / Conv3d
    ... train ...
    emulation.remove()                                       # the model is plain fp32 again

Sites are named as the simulator names its rounding sites: MODULE/in, MODULE/weight, MODULE/out in forward,
MODULE/out_grad (the gradient arriving at the output), MODULE/in_grad and MODULE/w_grad in backward.
Each rounding returns what it did (mpsim.round(..., stats=True)), summed per site: Emulation.stats().
"""
import types

import torch
import torch.nn.functional as F
from torch import nn

import mpsim

from ._tensors import check_float_tensor

DEFAULT_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_MASK64 = (1 << 64) - 1


def _mix64(x):
    """splitmix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
    OOPSLA 2014): distinct (seed, site, call) triples get unrelated stochastic-rounding seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class RoundingSite:
    """One place where the emulated model rounds: a name, a format, a mode and what it has rounded so far.
    A stochastic site draws a fresh seed per call from (seed, site index, call number), so a run is
    reproducible and no two calls reuse one random stream."""

    def __init__(self, name, index, fmt, mode, *, seed, sr_bits, subnormals, overflow):
        self.name = name
        self.fmt = fmt
        self.mode = mode
        self._index = index
        self._seed = seed
        self._sr_bits = sr_bits
        self._subnormals = subnormals
        self._overflow = overflow
        self.calls = 0
        self.totals = {}
        # Callables (site name, tensor) shown every tensor before it is rounded: GradientMonitor counts the
        # gradients at the rounding sites, as the simulator counts them, through these.
        self.observers = []

    def __call__(self, x):
        check_float_tensor(x, self.name)
        for observe in self.observers:
            observe(self.name, x)
        seed = _mix64(_mix64((self._seed & _MASK64) ^ _mix64(self._index)) ^ self.calls)
        self.calls += 1
        y, stats = mpsim.round(x.contiguous(), self.fmt, self.mode, seed=seed, sr_bits=self._sr_bits,
                               subnormals=self._subnormals, overflow=self._overflow, stats=True)
        for k, v in stats.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("max_abs", "min_abs_nonzero"):
                self.totals[k] = self.totals.get(k, 0) + v
        return y


class _Round(torch.autograd.Function):
    """Forward: x rounded at one site (or kept); backward: the incoming gradient rounded at another."""

    @staticmethod
    def forward(ctx, x, forward_site, backward_site):
        ctx.backward_site = backward_site
        return forward_site(x) if forward_site is not None else x.clone()

    @staticmethod
    def backward(ctx, grad):
        site = ctx.backward_site
        return (site(grad) if site is not None else grad), None, None


def _round(x, forward_site, backward_site):
    if forward_site is None and backward_site is None:
        return x
    return _Round.apply(x, forward_site, backward_site)


def _emulated_forward(module, x):
    """The module's own fp32 computation between roundings (bound to the module as its forward)."""
    s = module._mpsim_sites
    w = _round(module.weight, s["weight"], s["w_grad"])
    b = _round(module.bias, s["weight"], s["w_grad"]) if module.bias is not None else None
    xin = _round(x, s["in"], s["in_grad"])
    y = F.linear(xin, w, b) if isinstance(module, nn.Linear) else module._conv_forward(xin, w, b)
    return _round(y, s["out"], s["out_grad"])


class Emulation:
    """The hooks emulate() installed; remove() restores the modules (also on leaving a `with` block)."""

    def __init__(self, modules, sites):
        self._modules = modules
        self.sites = sites  # name -> RoundingSite

    @property
    def modules(self):
        """The modules whose forward is emulated."""
        return list(self._modules)

    def stats(self):
        """Per site, the sums of what its roundings did (mpsim.round's stats: count, underflow, subnormal,
        overflow, ...), since emulate() or the last reset()."""
        return {name: dict(site.totals) for name, site in self.sites.items()}

    def reset(self):
        for site in self.sites.values():
            site.totals = {}

    def remove(self):
        for m in self._modules:
            if "forward" in m.__dict__:
                del m.forward
            m.__dict__.pop("_mpsim_sites", None)
        self._modules = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def emulate(model, format="fp16", mode="rne", *, grad_format=None, grad_mode=None, weights=True,
            module_types=DEFAULT_TYPES, seed=0, sr_bits=32, subnormals="keep", overflow="inf"):
    """Makes every module of `module_types` in `model` (Linear and convolutions by default) compute as under
    autocast to `format`: inputs, weights and bias, and outputs rounded to `format` with `mode`; the
    gradients at the output, the input and the weights rounded to `grad_format` (default `format`) with
    `grad_mode` (default `mode`). weights=False keeps weights and their gradients in fp32.
    Returns an Emulation (remove() undoes it). The model's parameters must be float32 or float64 on the CPU."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"emulate: expected a torch.nn.Module, got {type(model).__name__}")
    mpsim.Format(format)  # an unknown name fails here, naming it
    grad_format = grad_format or format
    grad_mode = grad_mode or mode
    mpsim.Format(grad_format)
    chosen = [(name or type(m).__name__, m) for name, m in model.named_modules() if isinstance(m, tuple(module_types))]
    if not chosen:
        raise ValueError(f"emulate: {type(model).__name__} has no module of the types "
                         f"{', '.join(t.__name__ for t in module_types)}")
    for name, m in chosen:
        if not isinstance(m, DEFAULT_TYPES):
            raise TypeError(f"emulate: {name} is a {type(m).__name__}; the hooks emulate "
                            f"{', '.join(t.__name__ for t in DEFAULT_TYPES)}")
        if "_mpsim_sites" in m.__dict__:
            raise ValueError(f"emulate: {name} is already emulated (remove() the first Emulation)")
        for pname, p in m.named_parameters(recurse=False):
            check_float_tensor(p, f"parameter {name}.{pname}")

    sites = {}
    options = dict(seed=seed, sr_bits=sr_bits, subnormals=subnormals, overflow=overflow)
    for name, m in chosen:
        own = {}
        for key, (fmt, md, on) in {"in": (format, mode, True), "weight": (format, mode, weights),
                                   "out": (format, mode, True), "out_grad": (grad_format, grad_mode, True),
                                   "in_grad": (grad_format, grad_mode, True),
                                   "w_grad": (grad_format, grad_mode, weights)}.items():
            if on:
                site = RoundingSite(f"{name}/{key}", len(sites), fmt, md, **options)
                sites[site.name] = own[key] = site
            else:
                own[key] = None
        m._mpsim_sites = own
        m.forward = types.MethodType(_emulated_forward, m)
    return Emulation([m for _, m in chosen], sites)
