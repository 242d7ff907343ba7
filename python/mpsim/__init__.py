"""mpsim: low-precision floating-point emulation and analysis, over the same C++ library as the `mpsim`
command line (docs/python.md).

    >>> import numpy as np, mpsim
    >>> x = np.array([1.0, 1e-8, 70000.0], dtype=np.float32)
    >>> mpsim.round(x, "fp16")
    array([ 1.,  0., inf], dtype=float32)

Arrays are numpy arrays or torch tensors of float32 / float64 (float16 / bfloat16 too, widened to float32),
any shape; the work runs in C++ with the GIL released, on the array's own memory (a strided input is made
contiguous first, a float16 / bfloat16 one widened: those two are copies). A torch tensor on another device
(CUDA, ...) is rounded there by torch's own cast where that cast is mpsim's rounding bit for bit (fp16,
bf16, fp8_e4m3, fp8_e5m2 to nearest-even), else through a copy to the host (docs/python.md#devices).
Formats are names, mpsim.Format objects, or torch / numpy dtypes (torch.float16, torch.float8_e4m3fn).
Misuse raises the types of mpsim._errors, the same from mpsim and mpsim.torch.
"""
# The package's compiled half (_core) may lie in another directory of sys.path than these .py files (a
# development tree: python/ beside build/python/, both put on sys.path by the venv's .pth): extend_path
# joins every mpsim/ directory found on sys.path into this package.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

import numpy as _np

from . import _core
from ._errors import RequiresGradError, UnsupportedDeviceError, UnsupportedDtypeError, UnsupportedLayoutError
from ._core import (  # noqa: F401  (the public API)
    Format,
    Histogram,
    UnderflowCounter,
    block_formats,
    formats,
    hist_report_json,
    is_block_format,
    rounding_modes,
    underflow_report_json,
)

__version__ = _core.__version__

from ._mma import matmul, matmul_models  # noqa: E402,F401  (matrix-unit models, docs/mma.md)
from ._core import Recipe, recipe_names  # noqa: E402,F401  (the scaling recipes, docs/recipes.md)
from ._core import MassLostCounter, mass_lost  # noqa: E402,F401  (the gradient mass a format flushes, docs/analysis.md)

__all__ = [
    "Format", "Histogram", "UnderflowCounter", "round", "encode", "decode", "decode_blocks", "formats",
    "block_formats", "is_block_format", "rounding_modes", "hist_report_json", "underflow_report_json",
    "RequiresGradError", "UnsupportedDeviceError", "UnsupportedDtypeError", "UnsupportedLayoutError",
    "matmul", "matmul_models", "Recipe", "recipe_names", "mass_lost", "MassLostCounter",
]

_FLOAT_DTYPES = (_np.float32, _np.float64)


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _half_name(x):
    """'fp16' / 'bf16' for a float16 array or tensor, an ml_dtypes bfloat16 array or a bfloat16 tensor."""
    if _is_torch(x):
        torch = _torch()
        return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(x.dtype)
    if isinstance(x, _np.ndarray):
        return "fp16" if x.dtype == _np.float16 else "bf16" if x.dtype.name == "bfloat16" else None
    return None


def _dtype_format_name(dtype):
    """The format name a torch or numpy dtype stands for (torch.float16 -> 'float16', torch.float8_e4m3fn ->
    'float8_e4m3fn', ml_dtypes.bfloat16 -> 'bfloat16': format.cpp's table knows torch's and ml_dtypes'
    spellings); mpsim._core's format_of calls this for anything that is not a name or a Format."""
    t = type(dtype)
    if t.__module__.split(".")[0] == "torch" and t.__name__ == "dtype":
        what, name = str(dtype), str(dtype).removeprefix("torch.")
        if name == "float4_e2m1fn_x2":
            name = "float4_e2m1fn"  # torch's packed fp4 dtype: two e2m1 codes per byte
    elif isinstance(dtype, _np.dtype) or (isinstance(dtype, type) and issubclass(dtype, _np.generic)):
        name = _np.dtype(dtype).name
        what = f"numpy dtype {name}"
    else:
        raise TypeError(f"fmt: expected a format name, an mpsim.Format or a torch / numpy dtype, not "
                        f"{t.__name__} {dtype!r}")
    if _known_format(name):
        return name
    raise ValueError(f"fmt: {what} is not a floating-point format mpsim emulates (mpsim.formats() lists them)")


def _known_format(name):
    try:
        Format(name)
        return True
    except ValueError:
        return False


def _check_device_and_layout(t, name):
    """A torch tensor mpsim can read: on a device with memory (not meta), dense and strided."""
    if t.device.type == "meta":
        raise UnsupportedDeviceError(f"{name} is a tensor on meta, which holds no values; mpsim rounds and "
                                     f"counts tensors on devices with memory (cpu, cuda, ...)")
    if t.layout != _torch().strided:
        raise UnsupportedLayoutError(f"{name} is a {t.layout} tensor; mpsim reads dense (strided) tensors: "
                                     f"pass {name}.to_dense()")


def _prepare(x, name="x", widen=False):
    """x as a contiguous CPU float32/float64 array or tensor (a strided one is copied, a tensor on another
    device copied to the host), with its kind. With widen, float16 / bfloat16 input is widened to float32
    first (exact)."""
    if _is_torch(x):
        _check_device_and_layout(x, name)
        if x.device.type != "cpu":
            x = x.detach().cpu()
    if widen and _half_name(x) is not None:
        x = x.float() if _is_torch(x) else x.astype(_np.float32)
    if _is_torch(x):
        if x.dtype not in (_torch().float32, _torch().float64):
            raise UnsupportedDtypeError(f"{name} has dtype {x.dtype}; mpsim rounds float16, bfloat16, float32 "
                                        f"and float64 tensors (convert with {name}.float())")
        if x.requires_grad:
            x = x.detach()
        return (x if x.is_contiguous() else x.contiguous()), "torch"
    if not isinstance(x, _np.ndarray):
        if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
            raise TypeError(f"{name}: {type(x).__name__} is not a numpy array or torch tensor")
        x = _np.asarray(x)
    if x.dtype not in _FLOAT_DTYPES:
        if x.dtype.kind in "iub":
            raise UnsupportedDtypeError(f"{name} has dtype {x.dtype}; mpsim rounds float16, bfloat16, float32 and "
                                        f"float64 arrays (convert with {name}.astype(numpy.float32))")
        raise UnsupportedDtypeError(f"{name} has dtype {x.dtype}; mpsim rounds float16, bfloat16, float32 and "
                                    f"float64 arrays")
    if not x.flags.c_contiguous:
        x = _np.ascontiguousarray(x)
    return x, "numpy"


def _torch():
    import torch
    return torch


def _kernel_view(t):
    """What _core is handed for a contiguous CPU torch tensor: a numpy view of its memory (about a microsecond,
    where torch's __dlpack__ exchange costs several), or the tensor itself, exchanged through DLPack, where
    torch gives no view (a tensor that requires grad, or has the lazy negation bit)."""
    try:
        return t.numpy()
    except (RuntimeError, TypeError):
        return t


def _empty(like, kind, dtype=None, shape=None):
    if dtype is None and shape is None:  # like is contiguous (_prepare): so is its empty_like
        return _torch().empty_like(like) if kind == "torch" else _np.empty_like(like)
    shape = like.shape if shape is None else shape
    if kind == "torch":
        torch = _torch()
        tdtype = like.dtype if dtype is None else {
            _np.uint8: torch.uint8, _np.uint16: torch.uint16, _np.uint32: torch.uint32,
            _np.float32: torch.float32, _np.float64: torch.float64}[dtype]
        return torch.empty(tuple(shape), dtype=tdtype)
    return _np.empty(shape, dtype=like.dtype if dtype is None else dtype)


def _check_out(out, want_shape, name="out"):
    if _is_torch(out):
        _check_device_and_layout(out, name)
        if out.device.type != "cpu":
            raise UnsupportedDeviceError(f"{name} is a torch tensor on {out.device} and the input is on the CPU; "
                                         f"out must be on the input's device")
        _check_no_grad(out, name)
        if not out.is_contiguous():
            raise ValueError(f"{name} is not contiguous; mpsim writes in place only into contiguous tensors")
    elif isinstance(out, _np.ndarray):
        if not out.flags.c_contiguous:
            raise ValueError(f"{name} is not C-contiguous; mpsim writes in place only into contiguous arrays")
        if not out.flags.writeable:
            raise ValueError(f"{name} is read-only")
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, not {type(out).__name__}")
    if tuple(out.shape) != tuple(want_shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}, expected {tuple(want_shape)}")


def _check_no_grad(out, name="out"):
    """Refuses to write into a tensor that requires grad while autograd records (RequiresGradError)."""
    if out.requires_grad and _torch().is_grad_enabled():
        raise RequiresGradError(
            f"{name} requires grad: writing rounded values into it would change it behind autograd's back (torch "
            f"refuses in-place operations on such leaves). Round inside torch.no_grad(), into a tensor that does "
            f"not require grad, or use mpsim.torch.quantize (differentiable)")


def _written(out):
    """Marks a torch tensor mpsim wrote into as modified in place, as torch's own in-place ops do (its version
    counter): autograd then refuses a backward that saved its old values instead of using the new ones."""
    if _is_torch(out) and not out.is_inference():
        _torch().autograd.graph.increment_version(out)
    return out


def _format(fmt):
    return fmt if isinstance(fmt, Format) else Format(fmt)


def _row_len(shape):
    return int(shape[-1]) if len(shape) else 1


def _check_no_element_options(fmt, subnormals, overflow, like, flip=0.0):
    if subnormals not in (None, "keep") or overflow not in (None, "inf") or like != "ieee":
        raise ValueError(f"subnormals, overflow and like do not apply to {fmt}: its elements keep subnormals "
                         "and saturate (OCP MX v1.0)")
    if flip != 0:
        raise ValueError(f"flip (soft errors) does not apply to {fmt}: a block format's element and scale codes "
                         "would need a rule of their own")


def round(x, fmt, mode="rne", *, seed=0, sr_bits=32, subnormals=None, overflow=None, like="ieee", daz=False,
          out=None, stats=False, block=0, block_scale="floor", index0=0, threads=0, flip=0.0, flip_seed=0,
          flip_bits="fraction"):
    """The values of x rounded to fmt, in x's dtype (simulate mode), as `mpsim round` computes them.

    x: numpy array or CPU torch tensor, float32 or float64, any shape. fmt: a format name (every name the
    command line takes: fp16, bf16, tf32, fp8_e4m3, ml_dtypes names, eXmY), a Format, or a block format
    (mxfp8_e4m3 ... nvfp4; float32 only: the dequantized values, blocks along the last axis).
    mode: rne, rtz, ru, rd, rna, rto, sr. seed / sr_bits: stochastic rounding (element i of the array uses
    generator index index0 + i). subnormals: keep | flush; overflow: inf | saturate (not given: fmt's own, keep
    and inf for a name, what with_options set for a Format); like: ieee | x86 |
    cuda-sm90 (the device's flushing rules); daz: subnormal inputs read as zero.
    out: an array to write into (out=x rounds in place). stats=True returns (values, stats dict) with the
    names of `mpsim round --stats-json`.
    flip: soft errors, as chop's and CPFloat's: with probability flip (in [0, 1]) an element's result has
    one bit of its fraction field (flip_bits="any": of its encoding) flipped (the bit drawn uniformly;
    every element eligible), decided by a
    generator keyed by flip_seed and the element's index (independent of seed, threads and chunking);
    stats then count them ("flipped"). docs/python.md.
    float16 / bfloat16 input (numpy float16, ml_dtypes bfloat16, torch half / bfloat16): rounded as its exact
    float32 values, the result stored back in x's dtype, which every value of fmt must fit (as `mpsim round`
    does for float16 files).
    """
    if _is_torch(x) and x.device.type != "cpu":
        from . import _device
        return _device.round_tensor(x, fmt, mode, out, stats, dict(
            seed=seed, sr_bits=sr_bits, subnormals=subnormals, overflow=overflow, like=like, daz=daz, block=block,
            block_scale=block_scale, index0=index0, threads=threads, flip=flip, flip_seed=flip_seed,
            flip_bits=flip_bits))
    half = _half_name(x)
    if half is not None:
        return _round_half(x, half, fmt, mode, out, stats, seed=seed, sr_bits=sr_bits, subnormals=subnormals,
                           overflow=overflow, like=like, daz=daz, index0=index0, threads=threads, flip=flip,
                           flip_seed=flip_seed, flip_bits=flip_bits)
    x, kind = _prepare(x)
    given_out = out is not None
    if out is None:
        out = _empty(x, kind)
    else:
        _check_out(out, x.shape)
    if isinstance(fmt, str) and is_block_format(fmt):
        if str(x.dtype) not in ("float32", "torch.float32"):
            raise TypeError(f"x has dtype {x.dtype}; block formats take float32")
        _check_no_element_options(fmt, subnormals, overflow, like, flip)
        st = _core.round_blocks_into(x, out, fmt, block, block_scale, _row_len(x.shape), mode, seed, sr_bits, daz,
                                     stats)
    elif kind == "torch":
        st = _core.round_into(_kernel_view(x), _kernel_view(out), _format(fmt), mode, seed, sr_bits, subnormals,
                              overflow, like, daz, stats, index0, threads, flip, flip_seed, flip_bits)
    else:
        st = _core.round_into(x, out, _format(fmt), mode, seed, sr_bits, subnormals, overflow, like, daz, stats,
                              index0, threads, flip, flip_seed, flip_bits)
    if given_out:
        _written(out)
    return (out, st) if stats else out


def _check_fits(f, x):
    """Every value of f is one of x's dtype (float16 / bfloat16), so rounded values can be stored in it."""
    h = Format(_half_name(x))
    if not (f.man_bits <= h.man_bits and f.emax <= h.emax and f.emin - f.man_bits >= h.emin - h.man_bits):
        raise ValueError(f"x is {x.dtype} but {f.name} values do not all fit in {h.name}, so the rounded values "
                         f"cannot be stored in x's dtype; convert x to float32 first")


def _round_half(x, half, fmt, mode, out, stats, **options):
    if isinstance(fmt, str) and is_block_format(fmt):
        raise TypeError(f"x has dtype {x.dtype}; block formats take float32")
    f = _format(fmt)
    _check_fits(f, x)
    if out is not None:
        _check_out(out, x.shape)
    wide, _ = _prepare(x, widen=True)
    values, st = round(wide, f, mode, stats=True, **options)
    # Every value of f is one of `half`: this encoding is exact, not a second rounding.
    result = encode(values, half).view(x.dtype)
    if out is not None:
        if _is_torch(out):
            with _torch().no_grad():
                out.copy_(result)
        else:
            out[...] = result
        result = out
    return (result, st) if stats else result


def encode(x, fmt, mode="rne", *, seed=0, sr_bits=32, subnormals=None, overflow=None, like="ieee", daz=False,
           out=None, stats=False, block=0, block_scale="floor", index0=0, threads=0, flip=0.0, flip_seed=0,
           flip_bits="fraction"):
    """The encodings of x rounded to fmt: uint8 / uint16 / uint32 by the format's storage, x's shape
    (viewable as the ml_dtypes type: mpsim.encode(x, "float8_e4m3fn").view(ml_dtypes.float8_e4m3fn)).

    For a block format: (elements, scales) as uint8 arrays (scales: one per block along the last axis),
    and for nvfp4 (elements, scales, tensor_scale). Options as mpsim.round; stats=True appends the stats.
    float16 / bfloat16 input is encoded from its exact float32 values. A tensor off the CPU is encoded from a
    host copy; the encodings are put on its device.
    """
    if _is_torch(x) and x.device.type != "cpu":
        return _on_host(encode, x, out, fmt, mode, seed=seed, sr_bits=sr_bits, subnormals=subnormals,
                        overflow=overflow, like=like, daz=daz, stats=stats, block=block, block_scale=block_scale,
                        index0=index0, threads=threads, flip=flip, flip_seed=flip_seed, flip_bits=flip_bits)
    x, kind = _prepare(x, widen=True)
    if isinstance(fmt, str) and is_block_format(fmt):
        _check_no_element_options(fmt, subnormals, overflow, like, flip)
        shape = tuple(x.shape)
        row = _row_len(shape)
        eff_block = block or (16 if fmt == "nvfp4" else 32)
        scale_shape = (shape[:-1] if shape else ()) + (-(-row // eff_block),)
        elements = _empty(x, kind, _np.uint8, shape)
        scales = _empty(x, kind, _np.uint8, scale_shape)
        tensor_scale, st = _core.encode_blocks_into(x, elements, scales, fmt, block, block_scale, row, mode, seed,
                                                    sr_bits, daz, stats)
        result = (elements, scales, tensor_scale) if fmt == "nvfp4" else (elements, scales)
        return result + (st,) if stats else result
    f = _format(fmt)
    bits_dtype = {1: _np.uint8, 2: _np.uint16, 4: _np.uint32}.get(f.storage_bytes)
    if bits_dtype is None:
        raise ValueError(f"encode: {f.name} needs {f.storage_bits} bits; encode writes formats of up to 32 bits")
    if out is None:
        out = _empty(x, kind, bits_dtype)
    else:
        _check_out(out, x.shape)
        _written(out)
    st = _core.encode_into(x, out, f, mode, seed, sr_bits, subnormals, overflow, like, daz, stats, index0, threads,
                           flip, flip_seed, flip_bits)
    return (out, st) if stats else out


def decode(bits, fmt, dtype=_np.float32, *, out=None):
    """The values of encodings (uint8 / uint16 / uint32, as mpsim.encode gives them, or an ml_dtypes array
    viewed as its bits) of fmt, as float32 (default) or float64; exact."""
    f = _format(fmt)
    storage = {1: _np.uint8, 2: _np.uint16, 4: _np.uint32}.get(f.storage_bytes)
    if isinstance(bits, _np.ndarray) and bits.dtype.kind != "u" and bits.dtype.itemsize == f.storage_bytes:
        bits = bits.view(storage)  # an ml_dtypes (or float16) array: its encodings
    if _is_torch(bits):
        _check_device_and_layout(bits, "bits")
        if bits.device.type != "cpu":
            return _on_host(decode, bits, out, fmt, dtype)
        kind = "torch"
        bits = bits.contiguous()
    else:
        bits = _np.ascontiguousarray(bits)
        kind = "numpy"
    dtype = _np.dtype(dtype).type
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(f"decode: dtype must be float32 or float64, not {_np.dtype(dtype).name}")
    if out is None:
        out = _empty(bits, kind, dtype)
    else:
        _check_out(out, bits.shape)
        _written(out)
    _core.decode_into(bits, out, f)
    return out


def _on_host(function, x, out, *args, **kwargs):
    """function(x, *args, **kwargs) for a tensor x off the CPU: computed on a host copy, the tensors of the
    result put on x's device (into out, given one there)."""
    _check_device_and_layout(x, "x")
    if out is not None:
        from ._device import check_out
        check_out(out, x)
    result = function(x.detach().cpu(), *args, **kwargs)
    moved = tuple(r.to(x.device) if _is_torch(r) else r for r in result) if isinstance(result, tuple) else (
        result.to(x.device))
    if out is not None:
        with _torch().no_grad():
            out.copy_(moved[0] if isinstance(moved, tuple) else moved)
        moved = (out,) + moved[1:] if isinstance(moved, tuple) else out
    return moved


def decode_blocks(elements, scales, fmt, tensor_scale=1.0, *, block=0, block_scale="floor"):
    """The float32 values of a block format's (elements, scales) as mpsim.encode gives them."""
    elements = _np.ascontiguousarray(elements) if not _is_torch(elements) else elements.contiguous()
    scales = _np.ascontiguousarray(scales) if not _is_torch(scales) else scales.contiguous()
    kind = "torch" if _is_torch(elements) else "numpy"
    out = _empty(elements, kind, _np.float32)
    _core.decode_blocks_into(elements, scales, float(tensor_scale), out, fmt, block, block_scale,
                             _row_len(elements.shape))
    return out
