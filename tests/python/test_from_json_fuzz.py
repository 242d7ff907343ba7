"""The Python `from_json` entry points (mpsim.Histogram, UnderflowCounter and MassLostCounter .from_json) on random
inputs, hypothesis-style but seeded and dependency-free: valid states are mutated (bytes flipped, cut, keys
dropped, values replaced by other JSON types, huge, negative or fractional numbers, long arrays) and every
mutant must either load or raise ValueError with a message; a crash, a hang or any other exception is a bug.
A loaded state must also survive to_json -> from_json unchanged. Prints what it tried.
MPSIM_FUZZ_CASES sets the number of mutants per entry point (default 3000; ./run test-full: 30000).
"""
import json
import os
import random

import numpy as np
import pytest

import mpsim

CASES = int(os.environ.get("MPSIM_FUZZ_CASES", "30000" if os.environ.get("MPSIM_EXHAUSTIVE_FULL") else "3000"))

ODD_VALUES = [None, True, False, 0, -1, 1, 2**31, 2**63, 2**64 + 5, -(2**63) - 1, 0.5, -0.0, 1e308, float("inf"),
              "", "fp16", "rne", "mpsim-hist-1", [], [0], [[0, 1]], [[-5, 2**62]], {}, {"a": 1}, "x" * 300]


def seeds():
    """Valid states of each entry point, from real data."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(200).astype(np.float32) * 1e-4, [0.0, np.inf, np.nan, 1e-42]]).astype(np.float32)
    h = mpsim.Histogram()
    h.add(x)
    c = mpsim.UnderflowCounter("fp16", "rne")
    c.add(x)
    sat = mpsim.UnderflowCounter("fp8_e4m3", "rtz")
    sat.add(x * 1e6)
    m = mpsim.MassLostCounter("fp16", 10)
    m.add(x)
    over = mpsim.MassLostCounter("fp8_e4m3", 20, "rtz")
    over.add(x)
    return {"Histogram": (mpsim.Histogram.from_json, [h.to_json(), mpsim.Histogram().to_json()]),
            "UnderflowCounter": (mpsim.UnderflowCounter.from_json, [c.to_json(), sat.to_json()]),
            "MassLostCounter": (mpsim.MassLostCounter.from_json, [m.to_json(), over.to_json()])}


def mutate_value(rng, value, depth=0):
    """One structural change somewhere inside a parsed JSON value."""
    if isinstance(value, dict) and value and depth < 6:
        key = rng.choice(sorted(value))
        roll = rng.random()
        out = dict(value)
        if roll < 0.2:
            del out[key]
        elif roll < 0.3:
            out[key + "_"] = out.pop(key)
        elif roll < 0.5:
            out[key] = rng.choice(ODD_VALUES)
        else:
            out[key] = mutate_value(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6:
        out = list(value)
        i = rng.randrange(len(out))
        roll = rng.random()
        if roll < 0.2:
            del out[i]
        elif roll < 0.3:
            out.insert(i, out[i])
        elif roll < 0.4:
            out = out * rng.choice([2, 50])
        elif roll < 0.6:
            out[i] = rng.choice(ODD_VALUES)
        else:
            out[i] = mutate_value(rng, out[i], depth + 1)
        return out
    if isinstance(value, bool) or value is None:
        return rng.choice(ODD_VALUES)
    if isinstance(value, int):
        return rng.choice([value + 1, value - 1, -value, value * 2**40, 2**64, -(2**70), value + 0.5, str(value)])
    if isinstance(value, float):
        return rng.choice([-value, value * 1e300, float("nan"), 0.0, int(value) if np.isfinite(value) else 0])
    return rng.choice(ODD_VALUES)


def mutate_text(rng, text):
    """A change of the text itself: a flipped, dropped or inserted byte, or a cut."""
    b = bytearray(text.encode())
    roll = rng.random()
    i = rng.randrange(len(b))
    if roll < 0.4:
        b[i] ^= 1 << rng.randrange(7)
    elif roll < 0.6:
        del b[i]
    elif roll < 0.8:
        b.insert(i, rng.choice(b'{}[],:"0123456789-.eE \\'))
    else:
        b = b[:i]
    return b.decode("utf-8", errors="replace")


@pytest.mark.parametrize("entry", ["Histogram", "UnderflowCounter", "MassLostCounter"])
def test_from_json_random_inputs(entry):
    from_json, valid = seeds()[entry]
    rng = random.Random(20261128)
    loaded = refused = 0
    for case in range(CASES):
        base = rng.choice(valid)
        if rng.random() < 0.6:
            text = json.dumps(mutate_value(rng, json.loads(base)))
            if rng.random() < 0.3:
                text = json.dumps(mutate_value(rng, json.loads(text)))
        else:
            text = mutate_text(rng, base)
        try:
            obj = from_json(text)
        except ValueError as e:
            assert str(e), f"case {case}: a ValueError without a message for {text[:200]!r}"
            refused += 1
            continue
        except Exception as e:  # anything else is a bug: say which input
            pytest.fail(f"case {case}: {type(e).__name__}: {e} for {text[:300]!r}")
        loaded += 1
        again = from_json(obj.to_json())
        assert again == obj, f"case {case}: to_json -> from_json changed the state of {text[:300]!r}"
    print(f"{entry}.from_json: {CASES} mutants: {loaded} loaded (and round-tripped), {refused} refused with ValueError")
    assert loaded + refused == CASES
    assert refused > CASES // 10  # the mutants do reach the checks
