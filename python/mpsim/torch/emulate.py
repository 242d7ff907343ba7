"""Emulation hooks: an fp32 model run as if under torch.autocast in a chosen format, with mpsim's rounding.

What torch.autocast does to a Linear or a convolution in fp16 (and what the simulator's mixed policies do,
DESIGN.md): the input, the weight and the bias are cast to fp16, the product accumulates in fp32 and the
output is rounded to fp16; in backward every gradient that passes one of those casts is rounded into the
low format too (the output's gradient arrives in fp16 because the output is an fp16 tensor; the input's and
the weight's gradients are fp16 results of fp16 GEMMs, cast back to fp32 for the master weights). Here each
of those casts is one rounding with mpsim.round (any format, any mode, stochastic included) around the
module's own fp32 computation, so real autograd, real optimisers and the real torch.amp.GradScaler run on
the emulated numbers. Other operations (activations, softmax, losses) run in fp32, as autocast runs them.

    emulation = mpsim.torch.emulate(model, "fp16")           # every Linear / Conv1d-3d / LSTM / LSTMCell
    ... train ...
    emulation.remove()                                       # the model is plain fp32 again

Sites are named as the simulator names its rounding sites: MODULE/in, MODULE/weight, MODULE/out in forward,
MODULE/out_grad (the gradient arriving at the output), MODULE/in_grad and MODULE/w_grad in backward.
An LSTM (or LSTMCell) is unrolled over time in Python with the sites of the simulator's LSTM
(lib/mpsim/nn/lstm.hpp): MODULE/in, w_ih, w_hh, ih_out, h_in, hh_out forward, gates_grad, h_grad, in_grad,
w_ih_grad, w_hh_grad, b_grad backward (docs/torch.md); a site inside the time loop rounds once per step.
Each rounding returns what it did (mpsim.round(..., stats=True)), summed per site: Emulation.stats().
"""
import atexit
import functools
import weakref

import torch
import torch.nn.functional as F
from torch import nn

import mpsim
from mpsim import _device

from ._tensors import check_float_tensor

DEFAULT_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.LSTM, nn.LSTMCell)
# What a site rounds: a forward value (GEMM input or output), a weight copy, an activation gradient or a
# weight gradient (the simulator's classes, lib/mpsim/nn/policy.hpp, with the two forward ones merged).
SITE_KINDS = ("forward", "weight", "activation_grad", "weight_grad")
_MASK64 = (1 << 64) - 1


def _mix64(x):
    """splitmix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
    OOPSLA 2014): distinct (seed, site, call) triples get unrelated stochastic-rounding seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


# Autograd graphs still alive when the interpreter finalizes (a script's last loss, kept in a global) are never
# freed: torch's PyNode destructor skips its Py_DECREF once Py_IsInitialized() is false
# (torch/csrc/autograd/python_function.h, PyNode::~PyNode), so a site a graph's node holds would keep its
# PreparedRounding, a C++ object, alive past nanobind's check at exit, which reports it as leaked. At exit,
# before finalization starts, every live site drops its C++ half (nothing runs a site after that).
_LIVE_SITES = weakref.WeakSet()


@atexit.register
def _release_sites_at_exit():
    for site in list(_LIVE_SITES):
        site.__dict__.pop("_rounding", None)


class RoundingSite:
    """One place where the emulated model rounds: a name, a format, a mode and what it has rounded so far.
    A stochastic site draws a fresh seed per call from (seed, site index, call number), so a run is
    reproducible and no two calls reuse one random stream.

    The options are parsed once, here (mpsim._core.PreparedRounding), and each call's stats are summed in
    C++: a call costs the rounding and a few microseconds of Python (docs/torch.md#cost)."""

    def __init__(self, name, index, fmt, mode, *, seed, sr_bits, subnormals, overflow, kind="forward"):
        if kind not in SITE_KINDS:
            raise ValueError(f"RoundingSite {name}: kind {kind!r} is not one of {', '.join(SITE_KINDS)}")
        self.name = name
        self.kind = kind
        self.fmt = fmt
        self.mode = mode
        self._rounding = mpsim._core.PreparedRounding(mpsim.Format(fmt) if isinstance(fmt, str) else fmt, mode,
                                                      sr_bits, subnormals, overflow, "ieee", False)
        # Call k's seed is _mix64(site_key ^ k): the first two of its three mixes are the same for every call.
        self._site_key = _mix64((seed & _MASK64) ^ _mix64(index)) if self._rounding.stochastic else None
        self.calls = 0
        # Callables (site name, tensor) shown every tensor before it is rounded: GradientMonitor counts the
        # gradients at the rounding sites, as the simulator counts them, through these.
        self.observers = []
        _LIVE_SITES.add(self)

    def __setstate__(self, state):
        self.__dict__.update(state)
        _LIVE_SITES.add(self)

    @property
    def totals(self):
        """The sums of mpsim.round's integer stats (count, underflow, subnormal, overflow_num, ...) over the
        calls since the site was made or reset() (an empty dict before the first)."""
        return self._rounding.totals()

    def reset(self):
        self._rounding.reset()

    def __getstate__(self):
        # The observers are a monitor's hooks, not part of the model: a copy or a loaded model has none.
        state = dict(self.__dict__)
        state["observers"] = []
        return state

    def __call__(self, x):
        check_float_tensor(x, self.name)
        for observe in self.observers:
            observe(self.name, x)
        seed = _mix64(self._site_key ^ self.calls) if self._site_key is not None else 0
        self.calls += 1
        if x.device.type != "cpu":
            return _device.round_prepared(self._rounding, x, seed, torch.get_num_threads())
        if not x.is_contiguous():
            x = x.contiguous()
        y = torch.empty_like(x)
        # numpy views of the two tensors' memory: a view costs about a microsecond where torch's __dlpack__
        # exchange, which a tensor passed to _core goes through, costs several (force: detached, and a tensor
        # with torch's lazy negation bit resolved into a copy). The rounding takes as many threads as torch's
        # operations do (torch.set_num_threads): starting threads the model's own work does not use cost the
        # emulated LSTM's 131,072-value input product milliseconds per call on a busy 2-core machine.
        self._rounding.round_into(x.numpy(force=True), y.numpy(), seed, torch.get_num_threads())
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


# The LSTM follows the simulator's mixed policies (lib/mpsim/nn/lstm.hpp, lib/mpsim/models/lstm_lm.cpp)
# site for site, in the order the simulator first calls them, so that an emulated torch LSTM and the
# simulator's LSTM round the same values: the input and the weight copies once per forward, the input
# product x W_ih^T of all time steps at once, then per time step h_{t-1} as the recurrent product's input
# and that product's output; in backward per time step the gates' pre-activation gradient and the
# gradient reaching h_{t-1} through the recurrence, then the input's gradient and the weight gradients.
# The bias, the cell state c_t, the gate nonlinearities and the output h_t stay fp32, as in the simulator
# (h_t is rounded where it is consumed: the next step's h_in, the next layer's or module's input).
_LSTM_DIRECTION_SITES = (("w_ih", "weight"), ("w_hh", "weight"), ("ih_out", "forward"), ("h_in", "forward"),
                    ("hh_out", "forward"), ("gates_grad", "activation_grad"), ("h_grad", "activation_grad"))
_LSTM_WEIGHT_GRAD_SITES = (("w_ih_grad", "weight_grad"), ("w_hh_grad", "weight_grad"), ("b_grad", "weight_grad"))
_GEMM_SITES = (("in", "forward"), ("weight", "weight"), ("out", "forward"), ("out_grad", "activation_grad"),
               ("in_grad", "activation_grad"), ("w_grad", "weight_grad"))


def _gemm_sites(name, module, make):
    return {key: make(f"{name}/{key}", kind) for key, kind in _GEMM_SITES}


def _lstm_sites(name, module, make):
    """Per layer: {"in", "in_grad", "directions": [per direction {w_ih, ..., b_grad}]}. A one-layer,
    one-direction module names its sites MODULE/SITE as the simulator does; otherwise layer k's are
    MODULE/lK/SITE, its reverse direction's MODULE/lK_reverse/SITE (torch's parameter suffixes), and the
    layer's input and input gradient, which both directions share, MODULE/lK/in and MODULE/lK/in_grad."""
    layers = getattr(module, "num_layers", 1)
    directions = 2 if getattr(module, "bidirectional", False) else 1
    has_bias = bool(module.bias)  # nn.LSTM and nn.LSTMCell keep the constructor's flag there
    out = []
    for k in range(layers):
        prefix = name if layers == 1 and directions == 1 else f"{name}/l{k}"
        prefixes = (prefix, f"{prefix}_reverse")[:directions]
        layer = {"in": make(f"{prefix}/in", "forward")}
        layer["directions"] = [{key: make(f"{p}/{key}", kind) for key, kind in _LSTM_DIRECTION_SITES} for p in prefixes]
        layer["in_grad"] = make(f"{prefix}/in_grad", "activation_grad")
        for p, d in zip(prefixes, layer["directions"]):
            for key, kind in _LSTM_WEIGHT_GRAD_SITES:
                d[key] = make(f"{p}/{key}", kind) if (key != "b_grad" or has_bias) else None
        out.append(layer)
    return out


def _lstm_weights(s, w_ih, w_hh, b_ih, b_hh):
    """The weight copies the GEMMs read and the fp32 bias (torch's two biases added: the simulator has one)."""
    w_ih = _round(w_ih, s["w_ih"], s["w_ih_grad"])
    w_hh = _round(w_hh, s["w_hh"], s["w_hh_grad"])
    b = None
    if b_ih is not None:
        b = _round(b_ih + b_hh, None, s["b_grad"])
    return w_ih, w_hh, b


def _lstm_step(pre_x, h, c, w_hh, b, s):
    """One time step of torch.nn.LSTM's equations (gate order i, f, g, o) from the rounded input product
    pre_x (B, 4H); returns (h_t, c_t). The sum is ordered as the simulator's, (x W_ih^T + h W_hh^T) + b."""
    h_in = _round(h, s["h_in"], s["h_grad"])
    pre_h = _round(h_in @ w_hh.t(), s["hh_out"], None)
    a = pre_x + pre_h
    if b is not None:
        a = a + b
    a = _round(a, None, s["gates_grad"])
    i, f, g, o = a.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _with_gradient(h):
    """The initial state h_0 itself, or (with autograd on) a copy that requires grad: the simulator computes
    and rounds the gradient of h_0 too (lstm_backward's last h_grad), so the h_grad site sees every step."""
    if torch.is_grad_enabled() and not h.requires_grad:
        return h.detach().clone().requires_grad_()
    return h


def _lstm_direction(x, w_ih, w_hh, b, h, c, s, reverse):
    """One direction of one layer over x (T, B, I) (already rounded): outputs (T, B, H), h_T, c_T."""
    T, B = x.shape[0], x.shape[1]
    pre_x = _round(x.reshape(T * B, -1) @ w_ih.t(), s["ih_out"], None)
    h = _with_gradient(h)
    outputs = [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        h, c = _lstm_step(pre_x[t * B:(t + 1) * B], h, c, w_hh, b, s)
        outputs[t] = h
    return torch.stack(outputs), h, c


def _check_state_pair(name, hx, rank):
    """hx must be (h_0, c_0), two tensors of the input's rank (torch's own LSTM asserts less clearly)."""
    if (not isinstance(hx, (tuple, list)) or len(hx) != 2 or
            any(not isinstance(t, torch.Tensor) or t.dim() != rank for t in hx)):
        raise ValueError(f"emulate: {name}: hx must be a tuple (h_0, c_0) of {rank}-D tensors")


def _emulated_lstm_forward(module, input, hx=None):
    """nn.LSTM.forward (bound to the module) unrolled over time with the rounding sites."""
    name = module._mpsim_name
    if isinstance(input, nn.utils.rnn.PackedSequence):
        raise TypeError(f"emulate: {name} got a PackedSequence; the emulated LSTM takes padded tensors "
                        f"(torch.nn.utils.rnn.pad_packed_sequence)")
    check_float_tensor(input, f"{name} input")
    if input.dim() not in (2, 3):
        raise ValueError(f"emulate: {name}: LSTM input must be 2-D (unbatched) or 3-D, got {input.dim()}-D")
    batched = input.dim() == 3
    batch_dim = 0 if module.batch_first else 1
    x = input if batched else input.unsqueeze(batch_dim)
    L, D, H = module.num_layers, 2 if module.bidirectional else 1, module.hidden_size
    if hx is None:
        zeros = torch.zeros(L * D, x.shape[batch_dim], H, dtype=x.dtype, device=x.device)
        hx = (zeros, zeros)
    else:
        _check_state_pair(name, hx, input.dim())
        if not batched:
            hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
    module.check_forward_args(x, hx, None)  # torch's own shape checks and messages
    if module.batch_first:
        x = x.transpose(0, 1)  # time-major from here on
    h_n, c_n = [], []
    for k, layer in enumerate(module._mpsim_sites):
        if k > 0 and module.dropout and module.training:
            x = F.dropout(x, module.dropout, training=True)
        xr = _round(x, layer["in"], layer["in_grad"])
        outs = []
        for d, s in enumerate(layer["directions"]):
            sfx = f"l{k}" + ("_reverse" if d else "")
            params = (getattr(module, f"{p}_{sfx}", None) for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            w_ih, w_hh, b = _lstm_weights(s, *params)
            out, h, c = _lstm_direction(xr, w_ih, w_hh, b, hx[0][k * D + d], hx[1][k * D + d], s, reverse=d == 1)
            outs.append(out)
            h_n.append(h)
            c_n.append(c)
        x = outs[0] if D == 1 else torch.cat(outs, dim=2)
    h_n, c_n = torch.stack(h_n), torch.stack(c_n)
    if module.batch_first:
        x = x.transpose(0, 1)
    if not batched:
        return x.squeeze(batch_dim), (h_n.squeeze(1), c_n.squeeze(1))
    return x, (h_n, c_n)


def _emulated_lstm_cell_forward(module, input, hx=None):
    """nn.LSTMCell.forward (bound to the module): one time step with the LSTM's sites. The weights are
    rounded on every call (each call is a forward), so their gradients are rounded once per time step."""
    name = module._mpsim_name
    check_float_tensor(input, f"{name} input")
    if input.dim() not in (1, 2):
        raise ValueError(f"emulate: {name}: LSTMCell input must be 1-D (unbatched) or 2-D, got {input.dim()}-D")
    batched = input.dim() == 2
    x = input if batched else input.unsqueeze(0)
    if hx is None:
        zeros = torch.zeros(x.shape[0], module.hidden_size, dtype=x.dtype, device=x.device)
        hx = (zeros, zeros)
    else:
        _check_state_pair(name, hx, input.dim())
        if not batched:
            hx = (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
    layer = module._mpsim_sites[0]
    s = layer["directions"][0]
    xr = _round(x, layer["in"], layer["in_grad"])
    w_ih, w_hh, b = _lstm_weights(s, module.weight_ih, module.weight_hh, module.bias_ih, module.bias_hh)
    pre_x = _round(xr @ w_ih.t(), s["ih_out"], None)
    h, c = _lstm_step(pre_x, _with_gradient(hx[0]), hx[1], w_hh, b, s)
    return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


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
            site.reset()

    def remove(self):
        for m in self._modules:
            if "forward" in m.__dict__:
                del m.forward
            m.__dict__.pop("_mpsim_sites", None)
            m.__dict__.pop("_mpsim_name", None)
        self._modules = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def emulate(model, format="fp16", mode="rne", *, grad_format=None, grad_mode=None, weights=True,
            module_types=DEFAULT_TYPES, seed=0, sr_bits=32, subnormals="keep", overflow="inf"):
    """Makes every module of `module_types` in `model` (Linear, the convolutions, LSTM and LSTMCell by
    default) compute as under autocast to `format`: inputs, weights and bias, and outputs rounded to `format`
    with `mode`; the gradients at the output, the input and the weights rounded to `grad_format` (default
    `format`) with `grad_mode` (default `mode`). An LSTM rounds at the simulator's LSTM sites instead (its
    bias, cell state and output stay fp32; docs/torch.md). weights=False keeps weights and their gradients in
    fp32. Returns an Emulation (remove() undoes it). The model's parameters must be float32 or float64 on
    the CPU; an LSTM with proj_size > 0 is refused (ValueError)."""
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
        if isinstance(m, nn.LSTM) and m.proj_size > 0:
            raise ValueError(f"emulate: {name} is an LSTM with proj_size={m.proj_size}; the emulated LSTM has "
                             f"no projection (h_t = W_hr (o * tanh(c_t))): use proj_size=0, or module_types "
                             f"without nn.LSTM to leave it in fp32")
        for pname, p in m.named_parameters(recurse=False):
            check_float_tensor(p, f"parameter {name}.{pname}")

    sites = {}
    options = dict(seed=seed, sr_bits=sr_bits, subnormals=subnormals, overflow=overflow)

    def make(site_name, kind):
        if kind in ("weight", "weight_grad") and not weights:
            return None
        fmt, md = (format, mode) if kind in ("forward", "weight") else (grad_format, grad_mode)
        site = sites[site_name] = RoundingSite(site_name, len(sites), fmt, md, kind=kind, **options)
        return site

    for name, m in chosen:
        recurrent = isinstance(m, (nn.LSTM, nn.LSTMCell))
        m._mpsim_sites = (_lstm_sites if recurrent else _gemm_sites)(name, m, make)
        m._mpsim_name = name
        forward = (_emulated_lstm_forward if isinstance(m, nn.LSTM) else
                   _emulated_lstm_cell_forward if recurrent else _emulated_forward)
        # A partial, not a bound method: it pickles (a bound method pickles as getattr(m, its function's
        # name), which a module does not have), so an emulated model deepcopies, pickles and torch.saves.
        m.forward = functools.partial(forward, m)
    return Emulation([m for _, m in chosen], sites)
