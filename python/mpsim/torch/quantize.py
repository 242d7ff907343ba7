"""mpsim.torch.quantize: rounding as a differentiable operation, for quantization-aware training.

    w_q = mpsim.torch.quantize(layer.weight, "fp8_e4m3")            # forward: mpsim.round; backward: identity
    y = torch.nn.functional.linear(x, w_q)

Forward is mpsim.round(x, fmt, mode, ...) (any format, block formats and stochastic rounding included, on any
device: docs/python.md#devices). Rounding is piecewise constant, so its true derivative is zero almost
everywhere; quantization-aware training uses a surrogate (docs/torch.md#quantize):
  backward="ste"      the straight-through estimator (Bengio, Leonard, Courville, "Estimating or propagating
                      gradients through stochastic neurons for conditional computation", 2013): the gradient
                      passes unchanged. The default.
  backward="clipped"  the gradient passes where |x| <= the format's max_finite and is zero beyond it (and at
                      NaN), as torch.fake_quantize_per_tensor_affine's gradient is zero outside its range: a
                      value the format cannot hold gets no push further out. Element formats only.
grad_format / grad_mode round the gradient that leaves the op (to the format a low-precision backward would
store it in, as emulate()'s backward sites do); default: not rounded.
"""
import torch

import mpsim

BACKWARD_MODES = ("ste", "clipped")


class _Quantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fmt, mode, backward, grad_format, grad_mode, options):
        ctx.backward = backward
        # A Format is kept as its state, not as the object: a graph alive at interpreter exit is never freed
        # (torch's PyNode destructor, emulate.py's _LIVE_SITES), and a C++ object in it is reported leaked.
        ctx.grad_format = grad_format.__getstate__() if isinstance(grad_format, mpsim.Format) else grad_format
        ctx.grad_mode = grad_mode
        if backward == "clipped":
            # Kept as a mask (one byte per element), not x: the gradient needs only where x lay.
            ctx.save_for_backward(x.abs() <= mpsim.Format(fmt).max_finite)
        return mpsim.round(x.detach(), fmt, mode, **options)

    @staticmethod
    def backward(ctx, grad):
        if ctx.backward == "clipped":
            (inside,) = ctx.saved_tensors
            grad = torch.where(inside, grad, torch.zeros_like(grad))
        if ctx.grad_format is not None:
            fmt = ctx.grad_format
            if isinstance(fmt, tuple):
                fmt = mpsim.Format(fmt[0]).with_options(subnormals=fmt[1], overflow=fmt[2])
            grad = mpsim.round(grad.contiguous(), fmt, ctx.grad_mode)
        return grad, None, None, None, None, None, None


def quantize(x, fmt, mode="rne", *, backward="ste", grad_format=None, grad_mode="rne", **options):
    """x rounded to fmt (a format name, mpsim.Format, torch / numpy dtype, or a block format), as a
    differentiable operation: forward mpsim.round(x, fmt, mode, **options) (its keywords: seed, sr_bits,
    subnormals, overflow, block, ...; not out=), backward as `backward` says ("ste" or "clipped": the module
    docstring), the gradient then rounded to grad_format with grad_mode when one is given. x: a float16,
    bfloat16, float32 or float64 tensor on any device; the result has x's dtype, device and shape."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize: expected a torch.Tensor, got {type(x).__name__}")
    if backward not in BACKWARD_MODES:
        raise ValueError(f"quantize: backward={backward!r} is not one of {', '.join(BACKWARD_MODES)}")
    if "out" in options or "stats" in options:
        raise TypeError("quantize: out= and stats= are mpsim.round's; quantize returns a new tensor in the graph")
    block = isinstance(fmt, str) and mpsim.is_block_format(fmt)
    if backward == "clipped" and block:
        raise ValueError(f"quantize: backward='clipped' needs an element format's range; {fmt} scales each "
                         f"block into range (use backward='ste')")
    if not block:
        mpsim.Format(fmt)  # an unknown format fails here, naming it, before autograd is involved
    if grad_format is not None:
        mpsim.Format(grad_format)
    return _Quantize.apply(x, fmt, mode, backward, grad_format, grad_mode, options)
