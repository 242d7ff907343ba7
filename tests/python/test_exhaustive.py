"""fp16 and bf16 nearest-even through mpsim.encode against numpy's float16 cast and ml_dtypes' bfloat16 cast, and
the rounding of tensors off the CPU (torch's casts to fp16, bf16, fp8) against mpsim.round:
every float32 input with MPSIM_EXHAUSTIVE_FULL=1 (./run test-full), in chunks of 2^24; otherwise the first 2^20
inputs of every 16th chunk and of the inf / NaN patterns of both signs (spread over the exponents). NaN inputs: both must give a NaN of the same sign
(payloads differ, docs/formats.md)."""
import os
import time

import numpy as np

import ml_dtypes
import mpsim

CHUNK = 1 << 24
FULL = os.environ.get("MPSIM_EXHAUSTIVE_FULL") == "1"
SAMPLE = CHUNK if FULL else 1 << 20
# Starts of the ranges checked: every chunk, or every 16th plus the inf / NaN patterns of both signs.
STARTS = [c * CHUNK for c in range(256)] if FULL else [c * CHUNK for c in range(0, 256, 16)] + [0x7F800000, 0xFF800000]


def check(fmt, reference, storage):
    mismatches = nan_checked = inputs = 0
    t0 = time.time()
    for start in STARTS:
        bits = np.arange(start, start + SAMPLE, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        got = mpsim.encode(x, fmt)
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(reference).view(storage)
        diff = got != want
        if diff.any():
            gv = got.view(reference).astype(np.float32)
            wv = want.view(reference).astype(np.float32)
            nan_ok = np.isnan(gv) & np.isnan(wv) & (np.signbit(gv) == np.signbit(wv))
            nan_checked += int((diff & nan_ok).sum())
            bad = diff & ~nan_ok
            if bad.any():
                i = np.nonzero(bad)[0][:5]
                print(f"{fmt}: mismatch at inputs {[hex(int(b)) for b in bits[i]]}: mpsim {got[i]}, ref {want[i]}")
            mismatches += int(bad.sum())
        inputs += x.size
    print(f"{fmt} rne vs {reference.__name__}: {inputs} float32 inputs ({'all' if FULL else 'sampled chunks'}), "
          f"{mismatches} mismatches, {nan_checked} NaN inputs differing only in payload, {time.time() - t0:.1f} s")
    return mismatches


def test_fp16_every_float32():
    assert check("fp16", np.float16, np.uint16) == 0


def test_bf16_every_float32():
    assert check("bf16", ml_dtypes.bfloat16, np.uint16) == 0


def test_torch_casts_equal_mpsim_round_on_every_float32():
    """The rounding a tensor off the CPU takes (torch's cast, mpsim's NaN encodings; python/mpsim/_device.py),
    run on the CPU: equal to mpsim.round bit for bit, NaN payloads included, for every cast format."""
    import pytest
    torch = pytest.importorskip("torch")
    from mpsim import _device
    e4m3 = mpsim.Format("fp8_e4m3")
    total = 0
    for f in (mpsim.Format("fp16"), mpsim.Format("bf16"), mpsim.Format("fp8_e5m2"), e4m3,
              e4m3.with_options(overflow="saturate")):
        plan = _device.cast_plan(f)
        mismatches = inputs = 0
        t0 = time.time()
        for start in STARTS:
            bits = np.arange(start, start + SAMPLE, dtype=np.uint64).astype(np.uint32)
            x = torch.from_numpy(bits.view(np.float32))
            got = _device.round_by_cast(x, f, *plan)
            want = mpsim.round(x, f, overflow=f.overflow)  # round's keyword, not the Format's, sets overflow
            mismatches += int((got.view(torch.int32) != want.view(torch.int32)).sum())
            inputs += x.numel()
        print(f"{f.name} ({f.overflow}) through torch's cast to {plan[0]} vs mpsim.round: {inputs} float32 inputs "
              f"({'all' if FULL else 'sampled chunks'}), {mismatches} bit mismatches, {time.time() - t0:.1f} s")
        total += mismatches
    assert total == 0
