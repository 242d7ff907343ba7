"""mpsim.UnderflowCounter's counts of a tensor made by torch operations on the tensor's own device (a CUDA
tensor is counted where it lives; one small table comes to the host), equal to the C++ counter's add() count
for count (docs/torch.md#devices; tests/python/test_torch_device.py checks that on the CPU, edges included).

The C++ counter (lib/mpsim/analysis/range_counter.hpp) keeps, per input type, counts by (sign, binade key,
code): the key is 0 for ±0, the bit width of the significand field for a subnormal, exponent field +
mantissa bits for a normal value, then one key for ±inf and one for NaN (range_counter.cpp, kFloatKeys /
kDoubleKeys: 2^E - 1 + M + 2 keys per sign); the code is how many of the sign's three significand thresholds
(UnderflowCounter.significand_thresholds) the significand, normalised to its leading one, reaches. Those are
integer operations on the bits, exact on any device: here they become one torch.bincount per tensor over
the union of every counter's thresholds, and each counter's own codes are read off the union's on the host.
"""
import numpy as np
import torch

import mpsim

# (exponent bits, mantissa bits, integer view) of the input types the counter keeps a table for, and where
# that table starts in counts_array(): the float table first, then the double one (range_counter.hpp).
_FLOAT = (8, 23, torch.int32)
_DOUBLE = (11, 52, torch.int64)


def _keys(exp_bits, mant_bits):
    return (1 << exp_bits) - 1 + mant_bits + 2


_DOUBLE_OFFSET = 2 * _keys(8, 23) * 4


class _Union:
    """The thresholds of several counters (any formats and modes) for one input type: the sorted union B and,
    per counter and sign, the matrix that maps a union code (how many of B a significand reaches) to the
    counter's own code."""

    def __init__(self, counters, mant_bits):
        own = [np.array(c.significand_thresholds(mant_bits), dtype=np.int64) for c in counters]
        self.union = np.unique(np.concatenate([t.ravel() for t in own]))
        codes = len(self.union) + 1
        # Union code c means B[c-1] <= significand < B[c]: it reaches a threshold t of B iff t <= B[c-1].
        lower = np.concatenate([[-1], self.union])
        self.maps = []
        for t in own:
            per_sign = []
            for s in range(2):
                own_code = (lower[:, None] >= t[s][None, :]).sum(axis=1)
                m = np.zeros((codes, 4), dtype=np.int64)
                m[np.arange(codes), own_code] = 1
                per_sign.append(m)
            self.maps.append(per_sign)


def _table(values, exp_bits, mant_bits, int_dtype, union):
    """Counts by (sign, key, union code) of the values, and the largest and smallest non-zero finite |x|."""
    u = values.reshape(-1).view(int_dtype)
    top = (1 << exp_bits) - 1
    sign = (u < 0).to(torch.int64)
    e = (u >> mant_bits) & top
    m = u & ((1 << mant_bits) - 1)
    # The bit width of a subnormal's significand field: frexp's exponent of the field as a number (exact: it
    # has fewer bits than the float type's significand).
    width = torch.frexp(m.to(values.dtype))[1].to(int_dtype)
    normal = e != 0
    key = torch.where(normal, e + mant_bits, width) + ((e == top) & (m != 0)).to(int_dtype)
    # The significand normalised to its leading one (subnormals shifted up), mant_bits bits after the point.
    sig = torch.where(normal, m, torch.bitwise_left_shift(m, mant_bits + 1 - width) & ((1 << mant_bits) - 1))
    bounds = torch.as_tensor(union.union, dtype=int_dtype, device=values.device)
    code = torch.searchsorted(bounds, sig, right=True)
    keys, codes = _keys(exp_bits, mant_bits), len(union.union) + 1
    bins = (sign * keys + key.to(torch.int64)) * codes + code
    table = torch.bincount(bins, minlength=2 * keys * codes)
    a = values.reshape(-1).abs()
    finite = e != top
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    amax = torch.where(finite, a, zero).amax() if a.numel() else zero
    amin = (torch.where(finite & (a != 0), a, torch.full_like(zero, float("inf"))).amin() if a.numel()
            else torch.full_like(zero, float("inf")))
    extremes = torch.stack([amax, amin]).to(torch.float64).cpu().numpy()
    return table.cpu().numpy().reshape(2, keys, codes), float(extremes[0]), float(extremes[1])


def count(counters, values):
    """Adds values (a float32 / float64 tensor on any device; float16 / bfloat16 widened exactly) to each of
    counters as UnderflowCounter.add_many(counters, values) would, count for count, by torch operations on
    the tensor's device. A counter's moments, which these counts do not give, are dropped (merge's rule)."""
    values = values.detach()
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()
    if values.dtype not in (torch.float32, torch.float64):
        raise mpsim.UnsupportedDtypeError(f"values have dtype {values.dtype}; counted are float16, bfloat16, "
                                          f"float32 and float64 tensors")
    exp_bits, mant_bits, int_dtype = _FLOAT if values.dtype == torch.float32 else _DOUBLE
    union = _Union(counters, mant_bits)
    table, amax, amin = _table(values.contiguous(), exp_bits, mant_bits, int_dtype, union)
    if amin == float("inf"):
        amin = 0.0
    offset = 0 if mant_bits == 23 else _DOUBLE_OFFSET
    for counter, maps in zip(counters, union.maps):
        full = np.zeros(_counts_size(counter), np.int64)
        own = np.stack([table[s] @ maps[s] for s in range(2)])  # (sign, key, own code)
        full[offset:offset + own.size] = own.ravel()
        counter.merge(mpsim.UnderflowCounter.from_counts_array(counter.format, counter.mode, full, amax, amin))


_SIZES = {}


def _counts_size(counter):
    """The length of counter's range counts (counts_array() without the moment words)."""
    key = (counter.format, counter.mode)
    if key not in _SIZES:
        _SIZES[key] = len(mpsim.UnderflowCounter(counter.format, counter.mode, moments=False).counts_array())
    return _SIZES[key]
