"""mpsim.round on torch tensors that live off the CPU (a CUDA tensor, ...): through torch's own cast on the
tensor's device where that cast is mpsim's rounding bit for bit, else through a copy to the host
(docs/python.md#devices).

torch's casts from float32 to float16, bfloat16, float8_e5m2 and float8_e4m3fn round to nearest-even with
subnormals kept, as mpsim's fp16, bf16, fp8_e5m2 and fp8_e4m3 with mode="rne" do. What torch's float8_e4m3fn
cast does beyond ±448 differs between torch versions and devices (torch 2.15 on the CPU saturates to ±448;
torch 2.11 on the CPU and on an H200 gives NaN: measured with tests/python/test_torch_device.py), so the
input is clamped to ±448 before that cast: the result is then mpsim's overflow="saturate", and mpsim's
default for fp8_e4m3 (overflow="inf": beyond the rounding range a format without inf gives NaN) is the same
with those values set to NaN. NaN results take mpsim's NaN encodings (the IEEE formats keep the
sign and the top payload bits, as x86 F16C does; lib/mpsim/format/round.hpp), which torch's casts do not
all keep. tests/python/test_torch_device.py checks every case against mpsim.round on 2^18 random float32 patterns
and the edges; test_exhaustive.py on all 2^32 (MPSIM_EXHAUSTIVE_FULL=1).

Only float32 input (float16 / bfloat16 are widened to it, exactly) takes the cast: torch casts float64 to
these formats through float32, a double rounding that is not mpsim's (1 + 2^-11 + 2^-40 rounds up to fp16
directly and to 1 through float32), so float64 tensors take the host copy.
"""
import math

import numpy as np
import torch

import mpsim

from . import _core

from ._errors import UnsupportedDeviceError, UnsupportedDtypeError

_FLOAT32_BITS = 0x7FFFFFFF
_ROUNDED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _cast_targets():
    """(Format, torch dtype, NaN beyond the range) for each format torch's casts compute exactly."""
    e4m3 = mpsim.Format("fp8_e4m3")
    return [(mpsim.Format("fp16"), torch.float16, False), (mpsim.Format("bf16"), torch.bfloat16, False),
            (mpsim.Format("fp8_e5m2"), torch.float8_e5m2, False),
            (e4m3.with_options(overflow="saturate"), torch.float8_e4m3fn, False), (e4m3, torch.float8_e4m3fn, True)]


_TARGETS = None


def cast_plan(f, mode="rne", *, like="ieee", daz=False, flip=0.0, dtype=torch.float32):
    """(torch dtype, NaN beyond the range) when torch's cast to that dtype is mpsim.round(x, f, mode, ...)
    bit for bit for x of `dtype` (f: a Format, its subnormals / overflow options applied; NaN results aside,
    which round_by_cast sets), else None."""
    global _TARGETS
    if _TARGETS is None:
        _TARGETS = _cast_targets()
    if mode not in ("rne", "nearest-even", "roundTiesToEven") or like != "ieee" or daz or flip != 0:
        return None
    if dtype not in (torch.float32, torch.float16, torch.bfloat16) or f is None:
        return None
    for target, cast_dtype, nan_beyond in _TARGETS:
        if f == target:
            return cast_dtype, nan_beyond
    return None


def _nan_bits(f):
    """(mask, bits) with which a float32 NaN input's bits become mpsim's NaN result: (x & mask) | bits."""
    if f.nan_encoding == "ieee":
        # Sign and the top man_bits of the payload kept, the quiet bit set (round.hpp).
        payload = ((1 << f.man_bits) - 1) << (23 - f.man_bits)
        return 0x80000000 | 0x7F800000 | payload, 0x00400000
    # One NaN per sign (OCP e4m3fn's S.1111.111): what mpsim gives for a NaN input of that sign.
    return 0x80000000, _signed_nan_bits(f)


def _signed_nan_bits(f):
    got = mpsim.round(np.array([math.nan], np.float32), f).view(np.uint32)[0]
    return int(got) & _FLOAT32_BITS


def round_by_cast(x, f, cast_dtype, nan_beyond):
    """x (float32, any device) rounded to f through torch's cast to cast_dtype, NaN results set as mpsim
    sets them; nan_beyond: values beyond the rounding range become NaN (fp8_e4m3's overflow="inf")."""
    if cast_dtype == torch.float8_e4m3fn:
        # Clamped first (NaN passes through clamp): torch's own overflow behaviour for this cast is not the
        # same across versions (module docstring); values beyond 448 round to 448 or saturate to it.
        y = x.clamp(-f.max_finite, f.max_finite).to(cast_dtype).to(torch.float32)
    else:
        y = x.to(cast_dtype).to(torch.float32)
    xb = x.view(torch.int32)
    mask, bits = _nan_bits(f)
    # int32 views: the masks as signed 32-bit numbers.
    mask = mask - (1 << 32) if mask >= 1 << 31 else mask
    nan_result = (xb & mask) | bits
    if nan_beyond:
        # Beyond max_finite + half an ulp (ties go to max_finite: its significand is even, 1.110 for e4m3fn's
        # 448) nearest-even overflows, and without inf the result is NaN (round.hpp).
        half_ulp = math.ldexp(1.0, f.emax - f.man_bits - 1)
        beyond = torch.isinf(x) | (x.abs() > f.max_finite + half_ulp)
        y = torch.where(beyond, nan_result.view(torch.float32), y)
    return torch.where(torch.isnan(y), nan_result.view(torch.float32), y)


def store_exactly(values, dtype):
    """float32 values that are all float16 / bfloat16 values (NaN aside), in that dtype, NaN encoded as
    mpsim.encode encodes it (sign, top payload bits, quiet bit; torch's casts write their own NaN)."""
    b = values.view(torch.int32)
    if dtype == torch.bfloat16:
        return (b >> 16).to(torch.int16).view(torch.bfloat16)  # exact values: their top half is their bf16
    nan16 = (((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x03FF)).to(torch.int16).view(torch.float16)
    return torch.where(torch.isnan(values), nan16, values.to(torch.float16))


def stats_of(x, y, f):
    """mpsim.round's stats dict for x rounded to y (float32 tensors on one device), by torch operations on
    that device: the Stats of lib/mpsim/format/bulk.hpp, one transfer of a few numbers."""
    a = x.abs()
    finite = torch.isfinite(x)
    counted = finite & (x != 0)
    saturated = (a > f.max_finite) if f.overflow == "saturate" else torch.zeros_like(counted)
    none = torch.tensor(0.0, dtype=a.dtype, device=a.device)
    amax = torch.where(finite, a, none).amax() if a.numel() else none
    amin = torch.where(counted, a, torch.full_like(none, math.inf)).amin() if a.numel() else none
    ints = torch.stack([counted.sum(), (x == 0).sum(), torch.isnan(x).sum(), torch.isinf(x).sum(),
                        (counted & (y == x)).sum(), (counted & (y == 0)).sum(),
                        ((y != 0) & (y.abs() < f.min_normal)).sum(),
                        (counted & (~torch.isfinite(y) | saturated)).sum()]).tolist()
    extremes = torch.stack([amax, amin]).double().tolist()
    nonzero_finite, zero_in, nan, inf_in, exact, underflow, subnormal, overflow = ints
    # What each field of the library's table means (lib/mpsim/format/bulk.hpp, Stats); the keys and their order
    # are the table's (mpsim._core._stats_fields, from lib/mpsim/format/stats_fields.hpp): a field the table
    # gains and this function does not compute fails here by name, not as a dict that silently lacks it.
    values = {"count": x.numel(), "zero_in": zero_in, "nan": nan, "inf_in": inf_in, "exact": exact,
              "rounded": nonzero_finite - exact, "underflow": underflow, "subnormal": subnormal,
              "overflow_num": overflow, "flipped": 0, "max_abs": extremes[0],
              "min_abs_nonzero": extremes[1] if math.isfinite(extremes[1]) else 0.0}
    missing = [k for k in _core._stats_fields if k not in values]
    if missing or len(values) != len(_core._stats_fields):
        raise RuntimeError(f"mpsim._device.stats_of: the library's Stats fields {list(_core._stats_fields)} and "
                           f"the ones computed here {list(values)} differ (missing {missing})")
    return {k: values[k] for k in _core._stats_fields}


def check_out(out, x, name="out"):
    """out can take x's rounded values: a dense tensor on x's device, of x's shape, that autograd does not
    record writes to (RequiresGradError otherwise, as torch refuses in-place ops on such leaves)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor on {x.device} (x's device), not {type(out).__name__}")
    mpsim._check_device_and_layout(out, name)
    if out.device != x.device:
        raise UnsupportedDeviceError(f"{name} is on {out.device} and x on {x.device}; out must be on x's device")
    mpsim._check_no_grad(out, name)
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}, expected {tuple(x.shape)}")


def round_tensor(x, fmt, mode, out, stats, options):
    """mpsim.round for a torch tensor x off the CPU (options: mpsim.round's keywords)."""
    mpsim._check_device_and_layout(x, "x")
    if out is not None:
        check_out(out, x)
    if x.dtype not in _ROUNDED_DTYPES:
        raise UnsupportedDtypeError(f"x has dtype {x.dtype}; mpsim rounds float16, bfloat16, float32 and float64 "
                                    f"tensors (convert with x.float())")
    x = x.detach()
    f = None
    if not (isinstance(fmt, str) and mpsim.is_block_format(fmt)):
        # Not given (None): the format's own (Format.with_options keeps it).
        f = mpsim.Format(fmt).with_options(subnormals=options.get("subnormals"), overflow=options.get("overflow"))
    plan = cast_plan(f, mode, like=options.get("like", "ieee"), daz=options.get("daz", False),
                     flip=options.get("flip", 0.0), dtype=x.dtype)
    if plan is not None:
        if x.dtype != torch.float32:
            mpsim._check_fits(f, x)
        wide = x.float().contiguous()
        values = round_by_cast(wide, f, *plan)
        st = stats_of(wide, values, f) if stats else None
        if x.dtype != torch.float32:
            values = store_exactly(values, x.dtype)
    else:
        # Any other format, mode or option: mpsim's own rounding of a host copy.
        got = mpsim.round(x.cpu(), fmt, mode, stats=stats, **options)
        values, st = got if stats else (got, None)
        values = values.to(x.device)
    if out is not None:
        with torch.no_grad():
            out.copy_(values)
        values = out
    return (values, st) if stats else values


def round_prepared(rounding, x, seed, threads=0):
    """What mpsim._core.PreparedRounding.round_into does, for a float32 / float64 tensor x off the CPU: the
    rounded values on x's device (torch's cast where round_by_cast is exact, else a host copy), the call's
    stats added to the rounding's totals."""
    opts = rounding.options
    f = rounding.format
    plan = None
    if not rounding.stochastic:
        plan = cast_plan(f, rounding.mode, like=opts["like"], daz=opts["daz"], dtype=x.dtype)
    x = x.detach()
    if plan is not None:
        wide = x.float().contiguous()
        y = round_by_cast(wide, f, *plan)
        rounding.add_stats(stats_of(wide, y, f))
        return y.to(x.dtype)
    host = x.cpu().contiguous()
    y = torch.empty_like(host)
    rounding.round_into(host.numpy(), y.numpy(), seed, threads)
    return y.to(x.device)
