"""Op-level emulation: an fp32 model run as if under torch.autocast in a chosen format, with mpsim's rounding.

What torch.autocast does to a matrix product (a Linear, a convolution, matmul / bmm, attention's two
products) in fp16, and what the simulator's mixed policies do (docs/design.md): the operands are cast to fp16, the
product accumulates in fp32 and the output is rounded to fp16; in backward every gradient that passes one of
those casts is rounded into the low format too (the output's gradient arrives in fp16 because the output is
an fp16 tensor; the operands' gradients are fp16 results of fp16 GEMMs, cast back to fp32 for the master
weights). Here each of those casts is one rounding with mpsim.round (any format, any mode, stochastic
included) around torch's own fp32 computation, so real autograd, real optimisers and the real
torch.amp.GradScaler run on the emulated numbers. Other operations (activations, softmax, layer norm,
losses) run in fp32, as autocast runs them.

    emulation = mpsim.torch.emulate(model, "fp16")           # every product the model's forward computes
    ... train ...
    emulation.remove()                                       # the model is plain fp32 again

The products are caught where they are called, not where a module holds them: while the model (or any of its
submodules) runs its forward, a TorchFunctionMode sees every torch function call (F.linear, the
convolutions, matmul / mm / bmm / addmm / baddbmm, scaled_dot_product_attention, MultiheadAttention's
functional forward) and replaces the products by their emulated form (docs/torch.md#emulate). A product
whose weight is a parameter is named after the module holding it (MODULE/in, MODULE/weight, MODULE/out in
forward, MODULE/out_grad, MODULE/in_grad, MODULE/w_grad in backward: an nn.Linear's names whether it is
called as a module or its weight is used by MultiheadAttention's functional forward); a product of two
activations after the module running it and the operation (MODULE/matmul, MODULE/sdpa, ...).
An LSTM (or LSTMCell) is unrolled over time in Python with the sites of the simulator's LSTM
(lib/mpsim/nn/lstm.hpp): MODULE/in, w_ih, w_hh, ih_out, h_in, hh_out forward, gates_grad, h_grad, in_grad,
w_ih_grad, w_hh_grad, b_grad backward (docs/torch.md); a site inside the time loop rounds once per step.
A GRU (or GRUCell) is unrolled the same way, at the same places (docs/torch.md#gru-and-grucell). Products
emulate() cannot reproduce (RNN cells, einsum, ...) are named in a NotEmulatedWarning.
Each rounding returns what it did (mpsim.round(..., stats=True)), summed per site: Emulation.stats().
"""
import atexit
import functools
import math
import types
import warnings
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

import mpsim
from mpsim import _device

from ._tensors import check_float_tensor

DEFAULT_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.LSTM, nn.LSTMCell, nn.GRU, nn.GRUCell)
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
_LIVE_RECIPES = weakref.WeakSet()  # emulations holding an mpsim.Recipe (C++ as well), released alike


@atexit.register
def _release_sites_at_exit():
    for site in list(_LIVE_SITES):
        site.__dict__.pop("_rounding", None)
    for emulation in list(_LIVE_RECIPES):
        emulation.__dict__["_recipe"] = None


class RoundingSite:
    """One place where the emulated model rounds: a name, a format, a mode and what it has rounded so far.
    A stochastic site draws a fresh seed per call from (seed, site index, call number), so a run is
    reproducible and no two calls reuse one random stream.

    The options are parsed once, here (mpsim._core.PreparedRounding), and each call's stats are summed in
    C++: a call costs the rounding and a few microseconds of Python (docs/torch.md#cost)."""

    def __init__(self, name, index, fmt, mode, *, seed, sr_bits, subnormals, overflow, kind="forward",
                 observers=()):
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
        self.observers = list(observers)
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
# The GRU at the same places, its products' output gradients apart: r gates the recurrent product's n part
# (n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)), torch.nn.GRU), so the gradients reaching the two products
# differ; each is rounded where it reaches its product (ih_grad per time step, hh_grad), and the two biases,
# which cannot be added first, have a gradient site each.
_GRU_DIRECTION_SITES = (("w_ih", "weight"), ("w_hh", "weight"), ("ih_out", "forward"), ("h_in", "forward"),
                        ("hh_out", "forward"), ("hh_grad", "activation_grad"), ("ih_grad", "activation_grad"),
                        ("h_grad", "activation_grad"))
_GRU_WEIGHT_GRAD_SITES = (("w_ih_grad", "weight_grad"), ("w_hh_grad", "weight_grad"), ("b_ih_grad", "weight_grad"),
                          ("b_hh_grad", "weight_grad"))
_GEMM_SITES = (("in", "forward"), ("weight", "weight"), ("out", "forward"), ("out_grad", "activation_grad"),
               ("in_grad", "activation_grad"), ("w_grad", "weight_grad"))


def _recurrent_sites(name, module, make):
    """Per layer: {"in", "in_grad", "directions": [per direction {w_ih, ..., b_grad}]}. A one-layer,
    one-direction module names its sites MODULE/SITE as the simulator does; otherwise layer k's are
    MODULE/lK/SITE, its reverse direction's MODULE/lK_reverse/SITE (torch's parameter suffixes), and the
    layer's input and input gradient, which both directions share, MODULE/lK/in and MODULE/lK/in_grad."""
    layers = getattr(module, "num_layers", 1)
    directions = 2 if getattr(module, "bidirectional", False) else 1
    has_bias = bool(module.bias)  # nn.LSTM, nn.GRU and their cells keep the constructor's flag there
    gru = isinstance(module, (nn.GRU, nn.GRUCell))
    direction_sites, weight_grad_sites = ((_GRU_DIRECTION_SITES, _GRU_WEIGHT_GRAD_SITES) if gru else
                                          (_LSTM_DIRECTION_SITES, _LSTM_WEIGHT_GRAD_SITES))
    out = []
    for k in range(layers):
        prefix = name if layers == 1 and directions == 1 else f"{name}/l{k}"
        prefixes = (prefix, f"{prefix}_reverse")[:directions]
        layer = {"in": make(f"{prefix}/in", "forward")}
        layer["directions"] = [{key: make(f"{p}/{key}", kind) for key, kind in direction_sites} for p in prefixes]
        layer["in_grad"] = make(f"{prefix}/in_grad", "activation_grad")
        for p, d in zip(prefixes, layer["directions"]):
            for key, kind in weight_grad_sites:
                d[key] = make(f"{p}/{key}", kind) if (not key.startswith("b_") or has_bias) else None
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


def _gru_weights(s, w_ih, w_hh, b_ih, b_hh):
    """The weight copies the GEMMs read and the two fp32 biases (their gradients rounded at b_ih_grad, b_hh_grad)."""
    w_ih = _round(w_ih, s["w_ih"], s["w_ih_grad"])
    w_hh = _round(w_hh, s["w_hh"], s["w_hh_grad"])
    if b_ih is not None:
        b_ih, b_hh = _round(b_ih, None, s["b_ih_grad"]), _round(b_hh, None, s["b_hh_grad"])
    return w_ih, w_hh, b_ih, b_hh


def _gru_step(pre_x, h, w_hh, b_ih, b_hh, s):
    """One time step of torch.nn.GRU's equations (gate order r, z, n) from the rounded input product pre_x
    (B, 3H): r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r * gh_n),
    h_t = (1 - z) * n + z * h_{t-1}, with gi = pre_x + b_ih and gh = h_{t-1} W_hh^T (rounded) + b_hh."""
    gi = _round(pre_x, None, s["ih_grad"])
    h_in = _round(h, s["h_in"], s["h_grad"])
    gh = _round(h_in @ w_hh.t(), s["hh_out"], s["hh_grad"])
    if b_ih is not None:
        gi, gh = gi + b_ih, gh + b_hh
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def _with_gradient(h):
    """The initial state h_0 itself, or (with autograd on) a copy that requires grad: the simulator computes
    and rounds the gradient of h_0 too (lstm_backward's last h_grad), so the h_grad site sees every step."""
    if torch.is_grad_enabled() and not h.requires_grad:
        return h.detach().clone().requires_grad_()
    return h


def _recurrent_direction(gru, x, params, state, s, reverse):
    """One direction of one layer over x (T, B, I) (already rounded) from the state (h_0, c_0) or (h_0,):
    outputs (T, B, H) and the final state."""
    T, B = x.shape[0], x.shape[1]
    weights = (_gru_weights if gru else _lstm_weights)(s, *params)
    pre_x = _round(x.reshape(T * B, -1) @ weights[0].t(), s["ih_out"], None)
    state = (_with_gradient(state[0]),) + tuple(state[1:])
    outputs = [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        if gru:
            state = (_gru_step(pre_x[t * B:(t + 1) * B], state[0], *weights[1:], s),)
        else:
            state = _lstm_step(pre_x[t * B:(t + 1) * B], *state, *weights[1:], s)
        outputs[t] = state[0]
    return torch.stack(outputs), state


def _check_state(name, hx, rank, gru):
    """hx as a tuple of states: (h_0, c_0) for an LSTM, two tensors of the input's rank; (h_0,) for a GRU, from
    one tensor of the input's rank (torch's own modules assert less clearly)."""
    if gru:
        if not isinstance(hx, torch.Tensor) or hx.dim() != rank:
            raise ValueError(f"emulate: {name}: hx must be h_0, a {rank}-D tensor")
        return (hx,)
    if (not isinstance(hx, (tuple, list)) or len(hx) != 2 or
            any(not isinstance(t, torch.Tensor) or t.dim() != rank for t in hx)):
        raise ValueError(f"emulate: {name}: hx must be a tuple (h_0, c_0) of {rank}-D tensors")
    return tuple(hx)


def _emulated_rnn_forward(module, input, hx=None):
    """nn.LSTM.forward or nn.GRU.forward (bound to the module) unrolled over time with the rounding sites."""
    name = module._mpsim_name
    gru = isinstance(module, nn.GRU)
    kind = "GRU" if gru else "LSTM"
    if isinstance(input, nn.utils.rnn.PackedSequence):
        raise TypeError(f"emulate: {name} got a PackedSequence; the emulated {kind} takes padded tensors "
                        f"(torch.nn.utils.rnn.pad_packed_sequence)")
    check_float_tensor(input, f"{name} input")
    if input.dim() not in (2, 3):
        raise ValueError(f"emulate: {name}: {kind} input must be 2-D (unbatched) or 3-D, got {input.dim()}-D")
    batched = input.dim() == 3
    batch_dim = 0 if module.batch_first else 1
    x = input if batched else input.unsqueeze(batch_dim)
    L, D, H = module.num_layers, 2 if module.bidirectional else 1, module.hidden_size
    if hx is None:
        hx = (torch.zeros(L * D, x.shape[batch_dim], H, dtype=x.dtype, device=x.device),) * (1 if gru else 2)
    else:
        hx = _check_state(name, hx, input.dim(), gru)
        if not batched:
            hx = tuple(t.unsqueeze(1) for t in hx)
    module.check_forward_args(x, hx[0] if gru else hx, None)  # torch's own shape checks and messages
    if module.batch_first:
        x = x.transpose(0, 1)  # time-major from here on
    finals = [[] for _ in hx]
    for k, layer in enumerate(module._mpsim_sites):
        if k > 0 and module.dropout and module.training:
            x = F.dropout(x, module.dropout, training=True)
        xr = _round(x, layer["in"], layer["in_grad"])
        outs = []
        for d, s in enumerate(layer["directions"]):
            sfx = f"l{k}" + ("_reverse" if d else "")
            params = [getattr(module, f"{p}_{sfx}", None) for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            out, state = _recurrent_direction(gru, xr, params, [t[k * D + d] for t in hx], s, reverse=d == 1)
            outs.append(out)
            for f, t in zip(finals, state):
                f.append(t)
        x = outs[0] if D == 1 else torch.cat(outs, dim=2)
    finals = [torch.stack(f) if batched else torch.stack(f).squeeze(1) for f in finals]
    if module.batch_first:
        x = x.transpose(0, 1)
    if not batched:
        x = x.squeeze(batch_dim)
    return x, (finals[0] if gru else tuple(finals))


def _emulated_cell_forward(module, input, hx=None):
    """nn.LSTMCell.forward or nn.GRUCell.forward (bound to the module): one time step with the LSTM's or the
    GRU's sites. The weights are rounded on every call (each call is a forward), so their gradients are
    rounded once per time step."""
    name = module._mpsim_name
    gru = isinstance(module, nn.GRUCell)
    check_float_tensor(input, f"{name} input")
    if input.dim() not in (1, 2):
        raise ValueError(f"emulate: {name}: {type(module).__name__} input must be 1-D (unbatched) or 2-D, got "
                         f"{input.dim()}-D")
    batched = input.dim() == 2
    x = input if batched else input.unsqueeze(0)
    if hx is None:
        hx = (torch.zeros(x.shape[0], module.hidden_size, dtype=x.dtype, device=x.device),) * (1 if gru else 2)
    else:
        hx = _check_state(name, hx, input.dim(), gru)
        if not batched:
            hx = tuple(t.unsqueeze(0) for t in hx)
    layer = module._mpsim_sites[0]
    xr = _round(x, layer["in"], layer["in_grad"])
    params = (module.weight_ih, module.weight_hh, module.bias_ih, module.bias_hh)
    _, state = _recurrent_direction(gru, xr.unsqueeze(0), params, hx, layer["directions"][0], reverse=False)
    state = state if batched else tuple(t.squeeze(0) for t in state)
    return state[0] if gru else state


def _rnn_forward(module, *args, **kwargs):
    """An emulated nn.LSTM's or nn.GRU's forward: the unroll runs with torch function modes off, so that its own
    products (already rounded at its sites) are not caught a second time by the op-level emulation."""
    with torch._C.DisableTorchFunction():
        return _emulated_rnn_forward(module, *args, **kwargs)


def _cell_forward(module, *args, **kwargs):
    with torch._C.DisableTorchFunction():
        return _emulated_cell_forward(module, *args, **kwargs)


# ------------------------------------------------------------ the op-level emulation ------------------------

class NotEmulatedWarning(UserWarning):
    """A product emulate() cannot round (an RNN's fused kernel, an einsum, ...): it runs in fp32. The message
    names the module that computes it."""


# Modules whose products run in one fused kernel the emulation cannot open (torch.rnn_tanh / rnn_relu take the
# weights and loop in C++; the LSTM and the GRU are unrolled instead): named at emulate(), their products stay fp32.
_FUSED_RECURRENT = (nn.RNN, nn.RNNCell)
_RECURRENT = (nn.LSTM, nn.LSTMCell, nn.GRU, nn.GRUCell)  # unrolled at the simulator's LSTM sites (the GRU's alike)

# A product of two activations (no parameter among its operands) names its second operand "other"; a product
# with a parameter has _GEMM_SITES's in / weight (bias included) / out and their gradients.
_ACTIVATION_GEMM_SITES = (("in", "forward"), ("other", "forward"), ("out", "forward"),
                          ("out_grad", "activation_grad"), ("in_grad", "activation_grad"),
                          ("other_grad", "activation_grad"))
# scaled_dot_product_attention emulated as its math decomposition, two products with fp32 between them:
# scores = (q * scale) @ k^T, probs = softmax(scores + mask), out = probs @ v (docs/torch.md#attention).
_SDPA_SITES = (("q", "forward"), ("k", "forward"), ("scores", "forward"), ("probs", "forward"), ("v", "forward"),
               ("out", "forward"), ("out_grad", "activation_grad"), ("probs_grad", "activation_grad"),
               ("v_grad", "activation_grad"), ("scores_grad", "activation_grad"), ("q_grad", "activation_grad"),
               ("k_grad", "activation_grad"))


def _observers_of_every_site(sites):
    """The observers every one of `sites` has: the same callable, or one made per site by the same monitor
    (GradientMonitor gives each site its own, marked with .monitor). A site made during a forward (an
    attention's products have no module to make them in advance) starts with these, so that a monitor attached
    before the first forward counts it as it counts the others."""
    if not sites:
        return []
    common = []
    for o in sites[0].observers:
        key = getattr(o, "monitor", None)
        if all(any(x is o or (key is not None and getattr(x, "monitor", None) == key) for x in s.observers)
               for s in sites[1:]):
            common.append(o)
    return common


def _args(args, kwargs, names):
    """The values of a call's leading parameters `names`, positional or keyword (None where absent)."""
    return [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(names)]


def _with_args(args, kwargs, names, values):
    """(args, kwargs) of the call with the leading parameters `names` replaced by `values`."""
    args, kwargs = list(args), dict(kwargs)
    for i, (n, v) in enumerate(zip(names, values)):
        if i < len(args):
            args[i] = v
        elif n in kwargs:
            kwargs[n] = v
    return args, kwargs


def _emulated_product(emulation, func, args, kwargs, label, names, a_at, b_at, bias_at):
    """A product func(a, b[, bias]) (linear, a convolution, matmul, mm, bmm, addmm, baddbmm) as autocast computes
    it: both operands and the bias rounded, torch's own fp32 product, the output rounded; in backward the
    output's gradient and the operands' gradients rounded. Anything that is not a product of floating-point
    tensors (integer matmul, out=) is passed through."""
    vals = _args(args, kwargs, names)
    a, b = vals[a_at], vals[b_at]
    if ("out" in kwargs or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor)
            or not a.is_floating_point() or not b.is_floating_point()):
        return func(*args, **kwargs)
    if emulation._recipe is not None:
        return _recipe_product(emulation, func, args, kwargs, label, vals, a_at, b_at, bias_at)
    sites = emulation._product_sites(label, a, b)
    if sites is None:
        return func(*args, **kwargs)
    (a_site, a_grad), (b_site, b_grad), (out_site, out_grad), (bias_site, bias_grad) = sites
    vals[a_at] = emulation._operand(a, a_site, a_grad)
    vals[b_at] = emulation._operand(b, b_site, b_grad)
    if bias_at is not None and isinstance(vals[bias_at], torch.Tensor):
        # The bias is cast with the weight (autocast casts every floating operand) and, as the module-level
        # emulation did, rounded at the weight's site and its gradient at the weight gradient's.
        vals[bias_at] = emulation._operand(vals[bias_at], bias_site, bias_grad)
    args, kwargs = _with_args(args, kwargs, names, vals)
    if emulation._mma is not None:
        return emulation._operand(_mma_product(emulation, func, label, vals, a_at, b_at, bias_at, args, kwargs),
                                  out_site, out_grad)
    return emulation._operand(func(*args, **kwargs), out_site, out_grad)


# emulate(mma=MODEL): the products add as a matrix unit does (docs/mma.md), through mpsim.matmul, forward and
# backward; everything around the product (rounding sites, bias, softmax) stays as without it.
class _MmaBmm(torch.autograd.Function):
    """a (B, M, K) @ b (B, K, N) under the unit (model, input format, promote_every): each of the B products
    through mpsim.matmul with fp32 output; backward da = dy b^T and db = a^T dy under the same unit, as the
    simulator runs dgrad and wgrad (lib/mpsim/nn/matmul.hpp, GemmContext::mma)."""

    @staticmethod
    def forward(ctx, a, b, unit):
        ctx.unit = unit
        ctx.save_for_backward(a, b)
        return _mma_bmm(a, b, unit)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        da = _mma_bmm(dy, b.transpose(1, 2), ctx.unit) if ctx.needs_input_grad[0] else None
        db = _mma_bmm(a.transpose(1, 2), dy, ctx.unit) if ctx.needs_input_grad[1] else None
        return da, db, None


def _mma_bmm(a, b, unit):
    model, fmt, promote = unit
    out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype)
    for i in range(a.shape[0]):
        out[i] = torch.from_numpy(mpsim.matmul(a[i], b[i], model=model, input=fmt, promote_every=promote))
    return out.to(a.device)


def _mma_matmul(unit, a, b):
    """torch.matmul(a, b) (1-D operands and broadcast batch axes included) under the unit."""
    a1, b1 = a.dim() == 1, b.dim() == 1
    a = a.unsqueeze(0) if a1 else a
    b = b.unsqueeze(-1) if b1 else b
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    y = _MmaBmm.apply(a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:]),
                      b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:]), unit)
    y = y.reshape(*batch, a.shape[-2], b.shape[-1])
    y = y.squeeze(-2) if a1 else y
    return y.squeeze(-1) if b1 else y


def _mma_product(emulation, func, label, vals, a_at, b_at, bias_at, args, kwargs):
    """The product of the rounded operands under emulate(mma=...): linear as x W^T, matmul / mm / bmm as they
    are, addmm / baddbmm as beta input + alpha (mat1 mat2); the bias (addmm's input) added in fp32 after the
    unit's fp32 output, as a GEMM epilogue adds it. Convolutions are not run on the unit: fp32, named once."""
    if label in ("conv", "conv_transpose"):
        emulation._warn_not_emulated(f"{getattr(func, '__name__', label)} under mma=")
        return func(*args, **kwargs)
    a, b = vals[a_at], vals[b_at]
    y = _mma_matmul(emulation._mma, a, b.t() if label == "linear" else b)
    if label in ("addmm", "baddbmm"):
        alpha, beta = kwargs.get("alpha", 1), kwargs.get("beta", 1)
        y = y if alpha == 1 else alpha * y
        return y if beta == 0 else y + (vals[bias_at] if beta == 1 else beta * vals[bias_at])
    bias = vals[bias_at] if bias_at is not None else None
    return y + bias if isinstance(bias, torch.Tensor) else y


class _RecipeGemm(torch.autograd.Function):
    """y = q(x) q(w)^T under a scaling recipe, x (N, K) and w (M, K) float32: forward quantizes x and w as
    fprop_x and fprop_w; backward dx = q(dy) q(w^T)^T (dgrad_dy: dy (N, M), dgrad_w: w^T (K, M)) and
    dw = q(dy^T) q(x^T)^T (wgrad_dy: dy^T (M, N), wgrad_x: x^T (K, N)). Each operand is laid out with its GEMM's
    reduction axis along the rows, as Recipe.quantize takes it (docs/recipes.md), and quantized in the order the
    simulator's linear layer quantizes them (lib/mpsim/nn/linear.hpp lines 15-31). The products are torch's fp32
    matrix products of the quantized values; x and w themselves are saved, as TE and torchao keep the
    high-precision tensors, because wgrad quantizes x along another axis than fprop."""

    @staticmethod
    def forward(ctx, x, w, emulation, name, record):
        ctx.emulation, ctx.name = emulation, name
        ctx.save_for_backward(x, w)
        qx = emulation._quantize(x, "fprop_x", name, record)
        qw = emulation._quantize(w, "fprop_w", name, record)
        return qx @ qw.t()

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        e, name = ctx.emulation, ctx.name
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = e._quantize(dy, "dgrad_dy", name) @ e._quantize(w.t(), "dgrad_w", name).t()
        if ctx.needs_input_grad[1]:
            dw = e._quantize(dy.t(), "wgrad_dy", name) @ e._quantize(x.t(), "wgrad_x", name).t()
        return dx, dw, None, None, None


def _recipe_gemm(emulation, x, w, name):
    """x (..., K) times w (M, K)^T under the recipe, the leading axes of x flattened into the GEMM's rows."""
    # Whether this forward records into delayed scaling's histories: not in an evaluation pass under no_grad (the
    # Function's own forward always runs with grad mode off, so it is decided here).
    record = torch.is_grad_enabled()
    y = _RecipeGemm.apply(x.reshape(-1, x.shape[-1]), w, emulation, name, record)
    return y.reshape(*x.shape[:-1], w.shape[0])


def _attention_probs(scores, mask, dropout_p, causal):
    """Attention's fp32 step between its two products (autocast's fp32 list): the causal and given masks, the
    softmax over the keys, dropout; scores (..., L, S)."""
    if causal:
        keep = torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1)
    return F.dropout(probs, dropout_p, training=True) if dropout_p else probs


class _RecipeBatchedGemm(torch.autograd.Function):
    """y[g] = q(x[g]) q(w[g])^T for G groups at once (attention's batch x heads), x (G, N, K), w (G, M, K)
    float32: _RecipeGemm's roles, each role's operand being the groups' matrices stacked along the rows (fprop_x:
    x as (G N, K), fprop_w: w as (G M, K); dgrad_dy: dy as (G N, M), dgrad_w: the w^T as (G K, M); wgrad_dy: the
    dy^T as (G M, N), wgrad_x: the x^T as (G K, N)), so that a per-tensor scale is one scale for the whole tensor
    (Transformer Engine's FP8 attention keeps one scale per tensor for q, k, v and the softmax output) and a
    row's or a 1-D block's scale stays within its group. The products are torch's fp32 batched products."""

    @staticmethod
    def forward(ctx, x, w, emulation, name, record):
        ctx.emulation, ctx.name = emulation, name
        ctx.save_for_backward(x, w)
        g, n, k = x.shape
        m = w.shape[1]
        qx = emulation._quantize(x.reshape(g * n, k), "fprop_x", name, record).reshape(g, n, k)
        qw = emulation._quantize(w.reshape(g * m, k), "fprop_w", name, record).reshape(g, m, k)
        return torch.matmul(qx, qw.transpose(1, 2))

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        e, name = ctx.emulation, ctx.name
        g, n, k = x.shape
        m = w.shape[1]
        dx = dw = None
        if ctx.needs_input_grad[0]:
            qdy = e._quantize(dy.reshape(g * n, m), "dgrad_dy", name).reshape(g, n, m)
            qwt = e._quantize(w.transpose(1, 2).reshape(g * k, m), "dgrad_w", name).reshape(g, k, m)
            dx = torch.matmul(qdy, qwt.transpose(1, 2))
        if ctx.needs_input_grad[1]:
            qdyt = e._quantize(dy.transpose(1, 2).reshape(g * m, n), "wgrad_dy", name).reshape(g, m, n)
            qxt = e._quantize(x.transpose(1, 2).reshape(g * k, n), "wgrad_x", name).reshape(g, k, n)
            dw = torch.matmul(qdyt, qxt.transpose(1, 2))
        return dx, dw, None, None, None


def _recipe_2d_tile(recipe):
    """The side of the square tiles a recipe scales its weight operands by (fp8-blockwise's block, nvfp4's 16 with
    2d=1), None for the recipes without them (docs/recipes.md)."""
    opts = dict(kv.split("=", 1) for kv in recipe.spec.partition(":")[2].split(",") if "=" in kv)
    if recipe.name == "fp8-blockwise":
        return int(opts.get("block", 128))
    if recipe.name == "nvfp4" and opts.get("2d", "1") == "1":
        return 16  # lib/mpsim/recipe/recipe.cpp, kTile2d
    return None


def _recipe_sdpa(emulation, q, k, v, mask, dropout_p, causal, scale, prefix):
    """Attention's two products under a recipe, as GEMMs by role (_RecipeBatchedGemm): scores = (q * scale) k^T
    (layer PREFIX/qk: x = q * scale, w = k) and out = p v (layer PREFIX/pv: x = the softmax's output p, w = v^T),
    the mask, the softmax and dropout in fp32 between them, as _emulated_sdpa places them. Returns None where the
    recipe's 2-D weight tiles would straddle two heads' rows (their rows per head not a multiple of the tile)."""
    lead = q.shape[:-2]
    g = math.prod(lead)
    L, E, S, Ev = q.size(-2), q.size(-1), k.size(-2), v.size(-1)
    tile = _recipe_2d_tile(emulation._recipe)
    if tile is not None and any(rows % tile for rows in (S, E, Ev)):
        return None
    for t in (q, k, v):
        if t.dtype != torch.float32:
            raise mpsim.UnsupportedDtypeError(f"emulate(recipe={emulation._recipe.spec!r}): {prefix}: attention's "
                                              f"operand is {t.dtype}; a recipe quantizes float32 operands")
    record = torch.is_grad_enabled()
    x = (q * scale).reshape(g, L, E)
    scores = _RecipeBatchedGemm.apply(x, k.reshape(g, S, E), emulation, f"{prefix}/qk", record).reshape(*lead, L, S)
    probs = _attention_probs(scores, mask, dropout_p, causal)
    vt = v.transpose(-2, -1).reshape(g, Ev, S)
    out = _RecipeBatchedGemm.apply(probs.reshape(g, L, S), vt, emulation, f"{prefix}/pv", record)
    return out.reshape(*lead, L, Ev)


def _recipe_product(emulation, func, args, kwargs, label, vals, a_at, b_at, bias_at):
    """A product under a scaling recipe (emulate(recipe=...)): F.linear, matmul / mm / addmm with a 2-D second
    operand, or a 2-D parameter times a 2-D activation, as _RecipeGemm; the bias is added in fp32 after the
    product, as torchao's Float8Linear adds it (torchao/float8/float8_linear.py); conv1d / conv2d as the GEMM of
    their im2col (_recipe_conv). Batched products of more than two dimensions on both sides (bmm, baddbmm, 3-D
    matmul) run in fp32 with a NotEmulatedWarning; attention's two products are quantized by _recipe_sdpa."""
    a, b = vals[a_at], vals[b_at]
    bias = vals[bias_at] if bias_at is not None else None
    if kwargs.get("alpha", 1) != 1 or kwargs.get("beta", 1) != 1:
        emulation._warn_not_emulated(f"{label} with alpha / beta under a recipe")
        return func(*args, **kwargs)
    for t, what in ((a, "input"), (b, "weight" if label in ("linear", "conv", "conv_transpose") else "other")):
        if t.dtype != torch.float32:
            raise mpsim.UnsupportedDtypeError(
                f"emulate(recipe={emulation._recipe.spec!r}): the {label} {what} is {t.dtype}; a recipe quantizes "
                f"float32 operands (Recipe.quantize)")
    if label == "conv" and func in (F.conv1d, F.conv2d):
        return _recipe_conv(emulation, func, args, kwargs)
    if label in ("conv", "conv_transpose"):
        raise NotImplementedError(f"emulate(recipe={emulation._recipe.spec!r}): {emulation._innermost()[0]} calls "
                                  f"{getattr(func, '__name__', func)}; under a recipe emulate() covers conv1d and "
                                  f"conv2d (mpsim train --policy covers its models' convolutions)")
    owner_b, owner_a = emulation._param(b), emulation._param(a)
    if label == "linear":
        x, w, transpose = a, b, False
    elif b.dim() == 2 and a.dim() >= 1 and not (owner_a is not None and owner_b is None and a.dim() == 2):
        x, w, transpose = a, b.t(), False  # a (..., K) @ b (K, N): w = b^T (N, K)
    elif a.dim() == 2 and b.dim() == 2:
        x, w, transpose = b.t(), a, True   # W (M, K) @ x (K, N) = (x^T W^T)^T: W keeps the weight's roles
    else:
        emulation._warn_not_emulated(f"{label} of {a.dim()}-D by {b.dim()}-D tensors under a recipe")
        return func(*args, **kwargs)
    owner = emulation._param(w) or (owner_a if transpose else owner_b)
    if owner is not None:
        mname, pname, module = owner
        if not emulation._chosen(module):
            return func(*args, **kwargs)
        stem = pname[:-len("_weight")] if pname.endswith("_weight") else pname
        name = mname if pname == "weight" else f"{mname}/{stem}"
    else:
        name = emulation._activation_prefix(label)
        if name is None:
            return func(*args, **kwargs)
    if x.dim() == 1:
        y = _recipe_gemm(emulation, x.unsqueeze(0), w, name).squeeze(0)
    else:
        y = _recipe_gemm(emulation, x, w, name)
    if transpose:
        y = y.t()
    if isinstance(bias, torch.Tensor):
        y = y + bias
    return y


def _recipe_conv(emulation, func, args, kwargs):
    """F.conv2d (F.conv1d as a conv2d of height 1) under a recipe, as the simulator's convolution computes it: the
    GEMM of im2col (lib/mpsim/nn/conv2d.hpp lines 78-112), here y = q(cols) q(w)^T with cols = F.unfold(x) (rows:
    output positions, reduction axis: C x kh x kw in torch's order) and w reshaped to (OC, C kh kw); dgrad gives
    the columns' gradient, which F.unfold's backward (fold) sums into dx; wgrad reduces over the positions."""
    x, w, bias, stride, padding, dilation, groups = _args(
        args, kwargs, ("input", "weight", "bias", "stride", "padding", "dilation", "groups"))
    spec = emulation._recipe.spec
    if groups not in (None, 1) or isinstance(padding, str):
        raise NotImplementedError(f"emulate(recipe={spec!r}): {emulation._innermost()[0]}: a convolution with "
                                  f"groups={groups} / padding={padding!r} is not covered under a recipe (groups=1 "
                                  f"and numeric padding are)")
    owner = emulation._param(w)
    if owner is None:
        name = emulation._activation_prefix("conv")
        if name is None:
            return func(*args, **kwargs)
    else:
        if not emulation._chosen(owner[2]):
            return func(*args, **kwargs)
        name = owner[0] if owner[1] == "weight" else f"{owner[0]}/{owner[1]}"

    def pair(v, default):
        v = default if v is None else v
        v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * (2 if func is F.conv2d else 1)
        return v if func is F.conv2d else (1 if default == 1 else 0,) + v

    stride, padding, dilation = pair(stride, 1), pair(padding, 0), pair(dilation, 1)
    unbatched = x.dim() == (3 if func is F.conv2d else 2)
    if unbatched:
        x = x.unsqueeze(0)
    if func is F.conv1d:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
    n, _, h, wd = x.shape
    oc, k = w.shape[0], w[0].numel()
    kh, kw = w.shape[2], w.shape[3]
    ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)  # (N, K, L)
    y = _recipe_gemm(emulation, cols.transpose(1, 2).reshape(n * ho * wo, k), w.reshape(oc, k), name)
    y = y.reshape(n, ho * wo, oc).transpose(1, 2).reshape(n, oc, ho, wo)
    if isinstance(bias, torch.Tensor):
        y = y + bias.reshape(1, oc, 1, 1)
    if func is F.conv1d:
        y = y.squeeze(2)
    return y.squeeze(0) if unbatched else y


def _emulated_sdpa(emulation, func, args, kwargs):
    """F.scaled_dot_product_attention as its math decomposition with the two products emulated: q scaled in
    fp32 (one multiplication, where torch's math path scales q and k by sqrt(scale) each), scores = q k^T
    rounded, the mask added and the softmax taken in fp32 (autocast's fp32 list), probs rounded as the second
    product's input, out rounded. What a hand-written attention under emulate() computes, and the one
    placement a CPU and a GPU share (their fused kernels round at other points: docs/torch.md#attention)."""
    q, k, v, mask, dropout_p, causal, scale, gqa = _args(
        args, kwargs, ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"))
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (q, k, v)):
        return func(*args, **kwargs)
    prefix = emulation._activation_prefix("sdpa")
    if prefix is None:
        return func(*args, **kwargs)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    if gqa:  # grouped-query attention: each key / value head serves q.size(-3) // k.size(-3) query heads
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    if emulation._recipe is not None:
        # Both products quantized by role as a Linear's GEMM (docs/torch.md#recipes); where the recipe's 2-D weight
        # tiles do not fit the heads, they stay fp32, named once.
        out = _recipe_sdpa(emulation, q, k, v, mask, dropout_p, causal, scale, prefix)
        if out is None:
            emulation._warn_not_emulated(f"scaled_dot_product_attention under {emulation._recipe.name} (its "
                                         f"{_recipe_2d_tile(emulation._recipe)}x{_recipe_2d_tile(emulation._recipe)} "
                                         f"weight tiles do not divide {k.size(-2)} keys, head size {q.size(-1)} "
                                         f"into whole tiles per head)")
            return func(*args, **kwargs)
        return out
    s = emulation._sites_for(prefix, _SDPA_SITES)
    qr = emulation._operand(q * scale, s["q"], s["q_grad"])
    kr = emulation._operand(k, s["k"], s["k_grad"])
    scores = emulation._operand(emulation._matmul(qr, kr.transpose(-2, -1)), s["scores"], s["scores_grad"])
    probs = _attention_probs(scores, mask, dropout_p, causal)
    pr = emulation._operand(probs, s["probs"], s["probs_grad"])
    vr = emulation._operand(v, s["v"], s["v_grad"])
    return emulation._operand(emulation._matmul(pr, vr), s["out"], s["out_grad"])


def _without_torch_function_check(f):
    """A copy of the Python function f whose has_torch_function() is always False. f's body then runs with the
    emulation's mode on, so the products inside it are caught one by one (torch function modes are popped
    while a handler runs, and f called with the mode on would only hand itself to the mode again)."""
    g = dict(f.__globals__)
    g["has_torch_function"] = lambda *_: False
    copy = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    copy.__kwdefaults__ = f.__kwdefaults__
    return copy


# nn.MultiheadAttention's functional forward: the in-projection (one F.linear of in_proj_weight, or three),
# F.scaled_dot_product_attention or, when it returns the weights, bmm / baddbmm and softmax, then F.linear of
# out_proj's weight; written in Python behind one has_torch_function check.
_MHA_BODY = _without_torch_function_check(F.multi_head_attention_forward)


def _emulated_mha(emulation, func, args, kwargs):
    with emulation._mode:
        return _MHA_BODY(*args, **kwargs)


def _not_emulated(emulation, func, args, kwargs):
    emulation._warn_not_emulated(getattr(func, "__name__", str(func)))
    return func(*args, **kwargs)


def _handlers():
    """torch function -> handler(emulation, func, args, kwargs)."""
    h = {}
    linear = ("input", "weight", "bias")
    for f, label in ((F.linear, "linear"), (F.conv1d, "conv"), (F.conv2d, "conv"), (F.conv3d, "conv"),
                     (F.conv_transpose1d, "conv_transpose"), (F.conv_transpose2d, "conv_transpose"),
                     (F.conv_transpose3d, "conv_transpose")):
        h[f] = (label, linear, 0, 1, 2)
    T = torch.Tensor
    for fs, label, names in (((torch.matmul, T.matmul, T.__matmul__), "matmul", ("input", "other")),
                             ((torch.mm, T.mm), "mm", ("input", "mat2")),
                             ((torch.bmm, T.bmm), "bmm", ("input", "mat2"))):
        for f in fs:
            h[f] = (label, names, 0, 1, None)
    h[T.__rmatmul__] = ("matmul", ("self", "other"), 1, 0, None)  # other @ self
    for fs, label, names in (((torch.addmm, T.addmm), "addmm", ("input", "mat1", "mat2")),
                             ((torch.baddbmm, T.baddbmm), "baddbmm", ("input", "batch1", "batch2"))):
        for f in fs:
            h[f] = (label, names, 1, 2, 0)
    handlers = {f: (lambda e, func, args, kwargs, spec=spec: _emulated_product(e, func, args, kwargs, *spec))
                for f, spec in h.items()}
    handlers[F.scaled_dot_product_attention] = _emulated_sdpa
    handlers[F.multi_head_attention_forward] = _emulated_mha
    # Products emulate() does not round: run in fp32, named in a NotEmulatedWarning. The fused transformer and
    # attention kernels are reached only when called directly: with the mode on, nn.TransformerEncoderLayer
    # and nn.MultiheadAttention see has_torch_function() and take their composite paths.
    for name in ("einsum", "tensordot", "bilinear", "mv", "dot", "vdot", "addmv", "addbmm", "addr", "inner",
                 "chain_matmul", "gru", "gru_cell", "rnn_tanh", "rnn_relu", "rnn_tanh_cell", "rnn_relu_cell", "lstm",
                 "lstm_cell", "_transformer_encoder_layer_fwd", "_native_multi_head_attention"):
        for owner in (torch, T, F):
            f = getattr(owner, name, None)
            if f is not None and f not in handlers:
                handlers[f] = _not_emulated
    multi_dot = getattr(torch.linalg, "multi_dot", None)
    if multi_dot is not None:
        handlers[multi_dot] = _not_emulated
    return handlers


_HANDLERS = _handlers()


class _ProductMode(TorchFunctionMode):
    """On while an emulated model's forward runs: hands each product to its emulated form, the rest to torch."""

    def __init__(self, emulation):
        super().__init__()
        self._emulation = emulation

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = _HANDLERS.get(func)
        if handler is None:
            return func(*args, **(kwargs or {}))
        return handler(self._emulation, func, args, kwargs or {})


def _computes_no_product(module):
    """torch.nn's own leaf modules without parameters (ReLU, MaxPool2d, Flatten, Dropout, ...) compute no
    product, so they need no hooks: a module with hooks leaves torch's fast call path (about 3 us a call), and
    these run under their parent's mode all the same."""
    return (type(module).__module__.startswith("torch.nn.modules.") and not module._modules
            and not module._parameters)


class Emulation:
    """What emulate() installed: the rounding sites, the hooks that turn the op-level emulation on while the
    model runs; remove() restores the model (also on leaving a `with` block).

    The hooks are this object's methods, so the model holds it: a deepcopy, a pickle or a torch.save of the
    model copies it with the model, sites, hooks and all, and the copy goes on emulating as the original
    would have (Emulation.of(copy) is its handle)."""

    def __init__(self, model, module_types, **site_settings):
        self.sites = {}  # name -> RoundingSite
        self._make_site = _SiteFactory(self, **site_settings)
        self._module_types = module_types
        self._model = model
        self._root_name = type(model).__name__
        # Keyed by the modules and parameters themselves (hashed by identity), not their id()s, so that a
        # deepcopy or a pickle of the model, hooks and all, maps them to the copies.
        self._names = {m: (name or self._root_name) for name, m in model.named_modules()}
        self._params = {}  # parameter -> (module name, parameter name, module)
        for name, m in model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                self._params.setdefault(p, (name or self._root_name, pname, m))
        self._by_prefix = {}  # site prefix -> {key: RoundingSite or None}
        self._stack = []      # (module name, module, {operation: calls}) of the forwards running
        self._warned = set()
        self._mode = _ProductMode(self)
        self._modules = []    # modules with sites made at emulate(): Linear, convolutions, LSTM, LSTMCell
        self._replaced = []   # LSTM / LSTMCell modules whose forward is the unroll
        self._handles = []
        self._recipe = None         # an mpsim.Recipe: emulate(recipe=...) quantizes the products' operands by role
        self._mma = None            # (model, input format, promote_every): emulate(mma=...) adds as that unit does
        self._recipe_totals = {}    # LAYER/ROLE -> the summed integer stats of its quantizations
        self._recipe_mass = {}      # LAYER/ROLE -> the gradient-mass-lost sums (MassLost state, JSON text)
        # Callables (LAYER/ROLE, the operand as given, the values the GEMM multiplies) shown every operand a
        # recipe quantizes; not part of the model (a copy has none).
        self.operand_observers = []
        # Callables (LAYER/ROLE, the operand as quantized (contiguous float32), Recipe.quantize's dict with
        # "record" added: False in a forward under no_grad) shown every quantization: what GradientMonitor
        # counts under a recipe (monitor.py, RecipeCounts). Not part of the model either.
        self.quantize_observers = []

    @staticmethod
    def of(module):
        """The Emulation emulating `module` (or the model it is part of), None if there is none: the handle of
        a deepcopied, unpickled or torch.load'ed emulated model, whose stats() and remove() act on the copy."""
        return module.__dict__.get("_mpsim_emulated")

    def __getstate__(self):
        # The mode is torch's object and the stack belongs to the forwards running now: a copy starts with no
        # forward running and a mode of its own. Everything else (sites with their call counts and totals,
        # the modules and parameters it names, the hook handles) is copied, the modules and parameters
        # mapped to the copy's by pickle's and deepcopy's memo.
        state = dict(self.__dict__)
        del state["_mode"], state["_stack"]
        state["operand_observers"] = []
        state["quantize_observers"] = []
        r = state.pop("_recipe", None)
        # A Recipe is a C++ object: it travels as its spec, delayed scaling's state and the stochastic-rounding
        # counter, which rebuild an equal one.
        state["_recipe_saved"] = None if r is None else (r.spec, r.state(), r.sr_offset)
        return state

    def __setstate__(self, state):
        saved = state.pop("_recipe_saved", None)
        self.__dict__.update(state)
        self._recipe = None
        if saved is not None:
            self._recipe = mpsim.Recipe(saved[0])
            self._recipe.set_state(saved[1])
            self._recipe.sr_offset = saved[2]
            _LIVE_RECIPES.add(self)
        self._stack = []
        self._mode = _ProductMode(self)

    # -- sites --------------------------------------------------------------------------------------------

    def _sites_for(self, prefix, keys):
        """The sites PREFIX/KEY (made on first use, in `keys` order): {key: RoundingSite, or None where the
        options leave that value unrounded (weights=False)}."""
        got = self._by_prefix.get(prefix)
        if got is None:
            got = self._by_prefix[prefix] = {key: self._make_site(f"{prefix}/{key}", kind) for key, kind in keys}
        return got

    def _chosen(self, module):
        return self._module_types is None or isinstance(module, self._module_types)

    def _innermost(self):
        return self._stack[-1] if self._stack else (self._root_name, self._model, {})

    def _activation_prefix(self, label):
        """MODULE/LABEL for the first call of the operation in a forward of the module running it, then
        MODULE/LABEL.1, ...; None when module_types leaves that module out."""
        name, module, calls = self._innermost()
        if not self._chosen(module):
            return None
        k = calls.get(label, 0)
        calls[label] = k + 1
        return f"{name}/{label}" if k == 0 else f"{name}/{label}.{k}"

    def _param(self, t):
        """(module name, parameter name, module) of a parameter of the model, or of a view of one (a slice of
        MultiheadAttention's in_proj_weight); None for an activation."""
        found = self._params.get(t)
        if found is None and t._base is not None:
            found = self._params.get(t._base)
        return found

    def _product_sites(self, label, a, b):
        """((a's site, a's gradient's), (b's, b's gradient's), (output's, output gradient's), (the bias's, ...))
        for a product, or None where module_types leaves it out. A product with a parameter operand is named
        after the module holding the parameter: MODULE (its `weight`) or MODULE/NAME (another parameter,
        `_weight` dropped: MultiheadAttention's in_proj_weight gives MODULE/in_proj), with the sites of a
        Linear; a product of two activations is named after the module running it and the operation."""
        owner = self._param(b)
        weight_first = owner is None and (owner := self._param(a)) is not None
        if owner is not None:
            mname, pname, module = owner
            if not self._chosen(module):
                return None
            stem = pname[:-len("_weight")] if pname.endswith("_weight") else pname
            s = self._sites_for(mname if pname == "weight" else f"{mname}/{stem}", _GEMM_SITES)
            x, w, out = (s["in"], s["in_grad"]), (s["weight"], s["w_grad"]), (s["out"], s["out_grad"])
            return (w, x, out, w) if weight_first else (x, w, out, w)
        prefix = self._activation_prefix(label)
        if prefix is None:
            return None
        s = self._sites_for(prefix, _ACTIVATION_GEMM_SITES)
        other = (s["other"], s["other_grad"])
        return (s["in"], s["in_grad"]), other, (s["out"], s["out_grad"]), other

    def _operand(self, x, site, grad_site):
        """The one place a product's operand or output is rounded (site: forward, grad_site: its gradient in
        backward; either None to keep it). A scaling recipe replaces this step."""
        return _round(x, site, grad_site)

    def _matmul(self, a, b):
        """torch.matmul, or under mma= the matrix unit's product (_mma_matmul)."""
        return torch.matmul(a, b) if self._mma is None else _mma_matmul(self._mma, a, b)

    def _quantize(self, t, role, name, record=True):
        """t (rows x the GEMM's reduction axis) quantized by the recipe as `role` of layer `name`: the fp32 values
        the GEMM multiplies (Recipe.quantize, docs/recipes.md). Its integer counts are summed at NAME/ROLE, the
        simulator's site names (docs/recipes.md, "In the simulator"). record=False (a forward under
        torch.no_grad, an evaluation pass): delayed scaling quantizes with the current scales and its amax
        histories are restored afterwards, as the simulator's evaluation does not record into them."""
        if t.device.type != "cpu":
            raise mpsim.UnsupportedDeviceError(f"emulate(recipe={self._recipe.spec!r}): {name}/{role} is on "
                                               f"{t.device}; the recipes quantize CPU tensors")
        a = t.detach().contiguous()
        keep = None
        if not record and self._recipe.name == "fp8-tensorwise-delayed":
            keep = self._recipe.state()
        got = self._recipe.quantize(a.numpy(), role, name)
        if keep is not None:
            self._recipe.set_state(keep)
        key = f"{name}/{role}"
        totals = self._recipe_totals.setdefault(key, {})
        for k, v in got["stats"].items():
            if isinstance(v, int) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
        if got["quantized"] and not got["hadamard"]:
            # nvfp4's Hadamard-transformed wgrad operands have no element-wise counterpart in the input: no mass.
            self._recipe_mass[key] = mpsim._core.mass_lost_add(self._recipe_mass.get(key), a.numpy(), got["values"])
        values = torch.from_numpy(got["values"])
        for observe in self.operand_observers:
            observe(f"{name}/{role}", t, values)
        if self.quantize_observers:
            got["record"] = record
            for observe in self.quantize_observers:
                observe(key, a, got)
        return values

    def _warn_not_emulated(self, op):
        name, module, _ = self._innermost()
        if not self._chosen(module) or name in self._warned:
            return
        self._warned.add(name)
        warnings.warn(f"emulate: {name} ({type(module).__name__}) calls torch {op}, which emulate() does not "
                      f"round: its products run in fp32", NotEmulatedWarning, stacklevel=4)

    # -- the hooks that turn the mode on --------------------------------------------------------------------

    def _enter(self, module, args):
        if not self._stack:
            self._mode.__enter__()
        self._stack.append((self._names[module], module, {}))

    def _leave(self, module, args, output):
        self._stack.pop()
        if not self._stack:
            self._mode.__exit__(None, None, None)

    def _install(self, replaced):
        for m in self._model.modules():
            m.__dict__["_mpsim_emulated"] = self  # Emulation.of(m); also marks m as emulated
            if m is not self._model and _computes_no_product(m):
                continue
            self._handles.append(m.register_forward_pre_hook(self._enter))
            self._handles.append(m.register_forward_hook(self._leave, always_call=True))
        for m, forward in replaced:
            # A partial, not a bound method: it pickles (a bound method pickles as getattr(m, its function's
            # name), which a module does not have), so an emulated model deepcopies, pickles and torch.saves.
            m.forward = functools.partial(forward, m)
            self._replaced.append(m)

    # -- the public side ---------------------------------------------------------------------------------------

    @property
    def modules(self):
        """The modules whose sites were made at emulate() (Linear, convolutions, LSTM, LSTMCell): their
        outputs' gradients are rounded (and observed) at their own sites."""
        return list(self._modules)

    def stats(self):
        """Per site, the sums of what its roundings did (mpsim.round's stats: count, underflow, subnormal,
        overflow, ...), since emulate() or the last reset(). Under a recipe, per LAYER/ROLE (fc1/fprop_x, ...),
        the sums of the integer counts of Recipe.quantize's stats."""
        if self._recipe is not None:
            return {name: dict(t) for name, t in self._recipe_totals.items()}
        return {name: dict(site.totals) for name, site in self.sites.items()}

    def reset(self):
        for site in self.sites.values():
            site.reset()
        self._recipe_totals = {}
        self._recipe_mass = {}

    def mass_lost(self):
        """Under a recipe, per LAYER/ROLE, the gradient mass its quantizations lost since emulate() or reset():
        mpsim underflow's l1_lost, l2sq_lost (the shares of sum |x| and sum x^2 flushed to zero), cosine,
        mass_nonzero_num, mass_flushed_num (lib/mpsim/analysis/mass_lost.hpp), over every call's operand and
        the values the GEMM multiplied. nvfp4's Hadamard-transformed wgrad operands are left out."""
        return {name: mpsim._core.mass_lost_report(state) for name, state in self._recipe_mass.items()}

    @property
    def recipe(self):
        """The mpsim.Recipe quantizing the products (its state(), set_state(), sr_offset), None without one."""
        return self._recipe

    def step(self):
        """Closes a training step under a recipe: delayed scaling rolls its amax histories and computes the next
        step's scales from them (Recipe.end_step; a no-op for the other recipes and without a recipe). Call it
        once per optimiser step, after backward, as the simulator's trainer does (lib/mpsim/train/trainer.cpp,
        train_step: end_step right after forward_backward); micro-batches of one step share one history entry."""
        if self._recipe is not None:
            self._recipe.end_step()

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        for m in self._replaced:
            m.__dict__.pop("forward", None)
            m.__dict__.pop("_mpsim_sites", None)
            m.__dict__.pop("_mpsim_name", None)
        self._replaced = []
        for m in self._model.modules():
            m.__dict__.pop("_mpsim_emulated", None)
        self._modules = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _SiteFactory:
    """Makes an emulation's sites (at emulate(), and during a forward for the products no module holds). An
    object, not a closure over emulate()'s arguments: the hooks on the model hold the Emulation, which holds
    this, and a model that deepcopies, pickles and torch.saves needs all three to pickle."""

    def __init__(self, emulation, format, mode, grad_format, grad_mode, weights, options):
        self.emulation = emulation
        self.format, self.mode = format, mode
        self.grad_format, self.grad_mode = grad_format, grad_mode
        self.weights = weights
        self.options = options  # seed, sr_bits, subnormals, overflow

    def __call__(self, site_name, kind):
        if kind in ("weight", "weight_grad") and not self.weights:
            return None
        fmt, md = (self.format, self.mode) if kind in ("forward", "weight") else (self.grad_format, self.grad_mode)
        sites = self.emulation.sites
        observers = _observers_of_every_site([s for s in sites.values() if s.kind == kind])
        site = sites[site_name] = RoundingSite(site_name, len(sites), fmt, md, kind=kind, observers=observers,
                                               **self.options)
        for o in observers:  # a GradientMonitor takes its observers off the sites it knows when removed
            monitor = o.monitor() if callable(getattr(o, "monitor", None)) else None
            if monitor is not None and hasattr(monitor, "_observed_sites"):
                monitor._observed_sites.append(site)
        return site


def _check_mma(mma, promote, format, grad_format, recipe):
    """emulate(mma=...)'s refusals, each naming the argument."""
    if recipe is not None:
        raise ValueError("emulate: mma= with recipe= is not modelled here (mpsim train --policy RECIPE:mma=MODEL "
                         "runs the recipes' fp8 GEMMs on a unit)")
    if grad_format != format:
        raise ValueError(f"emulate: mma={mma!r} takes one input format; grad_format={grad_format!r} differs from "
                         f"format={format!r}")
    if isinstance(promote, bool) or not isinstance(promote, int) or promote < 0:
        raise ValueError(f"emulate: mma_promote must be a non-negative int, got {promote!r}")
    # An unknown model, a format the unit does not take or a promotion that is not a multiple of its block:
    # mpsim.matmul's own ValueError, which names them.
    mpsim.matmul(np.zeros((1, 1)), np.zeros((1, 1)), model=mma, input=format, promote_every=promote)


def emulate(model, format=None, mode=None, *, grad_format=None, grad_mode=None, weights=True,
            module_types=None, seed=0, sr_bits=32, subnormals="keep", overflow="inf", recipe=None, mma=None,
            mma_promote=0):
    """Makes `model` compute as under autocast to `format` (default "fp16", `mode` default "rne"; None stands for
    the defaults, so that a format given alongside recipe= is seen): every product its forward computes (F.linear, the
    convolutions, matmul / mm / bmm / addmm / baddbmm, scaled_dot_product_attention, MultiheadAttention's)
    takes its operands (bias included) rounded to `format` with `mode` and rounds its output; the gradients
    at the output and at the operands are rounded to `grad_format` (default `format`) with `grad_mode`
    (default `mode`). An LSTM / LSTMCell is unrolled at the simulator's LSTM sites instead (its bias, cell
    state and output stay fp32; docs/torch.md), a GRU / GRUCell alike. RNN modules, and products emulate() cannot round
    (einsum, ...), run in fp32 and are named in a NotEmulatedWarning. weights=False keeps weights and their
    gradients in fp32; module_types (default: every module) limits the emulation to the products of modules
    of those types (the module holding the weight, or else the one running the product). Returns an
    Emulation (remove() undoes it). The model's parameters must be float32 or float64 on the CPU; an LSTM
    with proj_size > 0 is refused (ValueError).

    recipe (a name of mpsim.recipe_names() with its options, "mxfp8:scaling_mode=rceil", or an mpsim.Recipe)
    quantizes every linear and convolution GEMM's operands, and attention's two products, by role instead (fprop x
    and w, dgrad dy and w, wgrad dy and x; fp32
    products, outputs and gradients kept in fp32; docs/torch.md#recipes); it sets every operand's format, so
    format, mode, grad_format, grad_mode and weights=False are refused with it. Emulation.step() closes a
    training step (delayed scaling). Conv1d / Conv2d run as their im2col GEMM; other convolutions and the
    recurrent modules are refused under a recipe.

    mma (a model of mpsim.matmul_models(), "h100", ...) makes the products of Linear, matmul / mm / bmm / addmm /
    baddbmm and attention add as that matrix unit does, forward and backward: the rounded operands go through
    mpsim.matmul(model=mma, input=format) with fp32 output, then the output is rounded as without it
    (docs/torch.md#matrix-units). mma_promote=N adds the unit's partial sums into fp32 every N elements of K.
    The unit takes one input format, so grad_format must equal format; convolutions, recurrent modules and
    recipe= are refused with it (ValueError)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"emulate: expected a torch.nn.Module, got {type(model).__name__}")
    if recipe is not None:
        given = [n for n, v in (("format", format), ("mode", mode), ("grad_format", grad_format),
                                ("grad_mode", grad_mode)) if v is not None]
        if weights is not True:
            given.append("weights")
        if given:
            raise ValueError(f"emulate: recipe= sets the format of every operand by its role (docs/recipes.md); "
                             f"it cannot be combined with {', '.join(given)}")
        if isinstance(recipe, str):
            recipe = mpsim.Recipe(recipe)  # an unknown name is refused with the list of known ones
        elif not isinstance(recipe, mpsim.Recipe):
            raise TypeError(f"emulate: recipe must be a recipe name or an mpsim.Recipe, got {type(recipe).__name__}")
    format = "fp16" if format is None else format
    mode = "rne" if mode is None else mode
    mpsim.Format(format)  # an unknown name fails here, naming it
    grad_format = grad_format or format
    grad_mode = grad_mode or mode
    mpsim.Format(grad_format)
    if mma is not None:
        _check_mma(mma, mma_promote, format, grad_format, recipe)
    module_types = tuple(module_types) if module_types is not None else None
    named = [(name or type(m).__name__, m) for name, m in model.named_modules()]
    chosen = [(n, m) for n, m in named if module_types is None or isinstance(m, module_types)]
    if not any(True for _ in model.parameters()):
        raise ValueError(f"emulate: {type(model).__name__} has no module with parameters: no product to emulate")
    for name, m in named:
        if "_mpsim_emulated" in m.__dict__:
            raise ValueError(f"emulate: {name} is already emulated (remove() the first Emulation)")
    for name, m in chosen:
        if module_types is not None and isinstance(m, _FUSED_RECURRENT):
            raise TypeError(f"emulate: {name} is a {type(m).__name__}; the hooks emulate the products of Linear, "
                            f"the convolutions, matmul, attention, LSTM, LSTMCell, GRU, GRUCell, not a fused "
                            f"recurrent kernel's")
        if isinstance(m, nn.LSTM) and m.proj_size > 0:
            raise ValueError(f"emulate: {name} is an LSTM with proj_size={m.proj_size}; the emulated LSTM has "
                             f"no projection (h_t = W_hr (o * tanh(c_t))): use proj_size=0, or module_types "
                             f"without nn.LSTM to leave it in fp32")
        for pname, p in m.named_parameters(recurse=False):
            check_float_tensor(p, f"parameter {name}.{pname}")
            if recipe is not None and p.dtype != torch.float32:
                raise mpsim.UnsupportedDtypeError(f"emulate: parameter {name}.{pname} is {p.dtype}; a recipe "
                                                  f"quantizes float32 operands")
        if mma is not None and isinstance(m, _RECURRENT + _FUSED_RECURRENT + (nn.modules.conv._ConvNd,)):
            raise ValueError(f"emulate: {name} is a {type(m).__name__}; under mma= emulate() runs the products of "
                             f"Linear, matmul and attention on the matrix unit, not convolutions or recurrent "
                             f"modules (mpsim train --policy ...:mma=MODEL covers its models'): leave it out with "
                             f"module_types, or emulate without mma")
        if recipe is not None and (isinstance(m, _RECURRENT + _FUSED_RECURRENT) or (
                isinstance(m, nn.modules.conv._ConvNd) and (not isinstance(m, (nn.Conv1d, nn.Conv2d)) or m.groups != 1
                                                            or isinstance(m.padding, str)
                                                            or getattr(m, "padding_mode", "zeros") != "zeros"))):
            raise ValueError(f"emulate: {name} is a {type(m).__name__}; under a recipe emulate() quantizes the "
                             f"GEMMs of Linear, matmul and Conv1d / Conv2d (groups=1, numeric zero padding), not "
                             f"other convolutions or recurrent modules (mpsim train --policy covers its models'): "
                             f"leave it out with module_types, or emulate without a recipe")
    fused = [f"{name} ({type(m).__name__})" for name, m in chosen if isinstance(m, _FUSED_RECURRENT)]

    emulation = Emulation(model, module_types, format=format, mode=mode, grad_format=grad_format,
                          grad_mode=grad_mode, weights=weights,
                          options=dict(seed=seed, sr_bits=sr_bits, subnormals=subnormals, overflow=overflow))
    make = emulation._make_site
    replaced = []
    if mma is not None:
        emulation._mma = (mma, format, int(mma_promote))
    if recipe is not None:
        emulation._recipe = recipe
        _LIVE_RECIPES.add(emulation)
        chosen = []  # no rounding sites: the recipe quantizes inside each GEMM
    # The sites of the modules that have them before any forward, in the order the module-level emulation made
    # them (the stochastic-rounding seeds follow a site's index).
    for name, m in chosen:
        if isinstance(m, DEFAULT_TYPES):
            emulation._modules.append(m)
        if isinstance(m, _RECURRENT):
            m._mpsim_sites = _recurrent_sites(name, m, make)
            m._mpsim_name = name
            replaced.append((m, _rnn_forward if isinstance(m, (nn.LSTM, nn.GRU)) else _cell_forward))
        elif isinstance(m, DEFAULT_TYPES):
            emulation._sites_for(name, _GEMM_SITES)
    emulation._install(replaced)
    if fused:
        emulation._warned.update(n.split(" ")[0] for n in fused)
        warnings.warn(f"emulate: {', '.join(fused)} compute their products in torch's fused recurrent kernels, "
                      f"which emulate() does not round: they run in fp32", NotEmulatedWarning, stacklevel=2)
    return emulation
