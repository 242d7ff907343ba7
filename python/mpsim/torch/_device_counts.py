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


_UNIONS = {}


def _union(counters, mant_bits):
    """_Union of these counters' formats and modes, made once per combination."""
    key = (mant_bits,) + tuple((c.format, c.mode) for c in counters)
    if key not in _UNIONS:
        _UNIONS[key] = _Union(counters, mant_bits)
    return _UNIONS[key]


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
    table = torch.bincount(bins, minlength=2 * keys * codes).reshape(2, keys, codes)
    a = values.reshape(-1).abs()
    finite = e != top
    zero = torch.zeros((), dtype=torch.float64, device=values.device)
    inf = torch.full_like(zero, float("inf"))
    if not a.numel():
        return table, zero, inf
    amax = torch.where(finite, a, torch.zeros_like(a)).amax().to(torch.float64)
    amin = torch.where(finite & (a != 0), a, torch.full_like(a, float("inf"))).amin().to(torch.float64)
    return table, amax, amin


class Pending:
    """What tensors counted on their device add to a set of counters, summed on that device until flush():
    a site's tensors of one step then cost one transfer and one counter update per format, not one each."""

    def __init__(self, counters):
        self.counters = counters
        self.tables = {}  # mant_bits -> summed (sign, key, union code) table, on the device
        self.amax = self.amin = None

    def add(self, values):
        """Counts values (a float32 / float64 tensor on any device; float16 / bfloat16 widened exactly)."""
        values = values.detach()
        if values.dtype in (torch.float16, torch.bfloat16):
            values = values.float()
        if values.dtype not in (torch.float32, torch.float64):
            raise mpsim.UnsupportedDtypeError(f"values have dtype {values.dtype}; counted are float16, bfloat16, "
                                              f"float32 and float64 tensors")
        exp_bits, mant_bits, int_dtype = _FLOAT if values.dtype == torch.float32 else _DOUBLE
        table, amax, amin = _table(values.contiguous(), exp_bits, mant_bits, int_dtype,
                                   _union(self.counters, mant_bits))
        self.tables[mant_bits] = table if mant_bits not in self.tables else self.tables[mant_bits] + table
        self.amax = amax if self.amax is None else torch.maximum(self.amax, amax)
        self.amin = amin if self.amin is None else torch.minimum(self.amin, amin)

    def flush(self):
        """Adds what was counted to the counters (merge: a counter's moments, not counted here, are dropped)."""
        if not self.tables:
            return
        amax, amin = (float(v) for v in torch.stack([self.amax, self.amin]).cpu().numpy())
        amin = 0.0 if amin == float("inf") else amin
        fulls = [np.zeros(_counts_size(c), np.int64) for c in self.counters]
        for mant_bits, table in self.tables.items():
            table = table.cpu().numpy()
            offset = 0 if mant_bits == 23 else _DOUBLE_OFFSET
            for full, maps in zip(fulls, _union(self.counters, mant_bits).maps):
                own = np.stack([table[s] @ maps[s] for s in range(2)])  # (sign, key, own code)
                full[offset:offset + own.size] += own.ravel()
        for counter, full in zip(self.counters, fulls):
            counter.merge(mpsim.UnderflowCounter.from_counts_array(counter.format, counter.mode, full, amax, amin))
        self.tables = {}
        self.amax = self.amin = None


def count(counters, values):
    """Adds values (a float32 / float64 tensor on any device; float16 / bfloat16 widened exactly) to each of
    counters as UnderflowCounter.add_many(counters, values) would, by torch operations on the tensor's
    device. A counter's moments, which these counts do not give, are dropped (merge's rule)."""
    pending = Pending(counters)
    pending.add(values)
    pending.flush()


_SIZES = {}


def _counts_size(counter):
    """The length of counter's range counts (counts_array() without the moment words)."""
    key = (counter.format, counter.mode)
    if key not in _SIZES:
        _SIZES[key] = len(mpsim.UnderflowCounter(counter.format, counter.mode, moments=False).counts_array())
    return _SIZES[key]
