"""`--dtype` names against numpy (issue 32, item 8): every name numpy's np.dtype() takes for a plain type means the
same type to mpsim, or is refused with a message naming numpy's type; mpsim's own short names are ones numpy does
not know. mpsim's reading is observed through the command line: `mpsim hist --dtype NAME raw.bin --json -` reports
the dtype it read (floating point), or exits 2 with "holds TYPE values" (integers) or with the refusal."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("MPSIM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN or not os.path.exists(BIN), reason="MPSIM_BIN is not set to the built mpsim")

# Every spelling numpy documents for the fixed-size types (sized codes, one-character codes, C names, Python
# names) with byte-order prefixes, and mpsim's own short names. numpy decides what each means here.
NUMPY_NAMES = """
    f2 f4 f8 f16 e f d g half single double float longdouble float16 float32 float64 float128
    u1 u2 u4 u8 B H I L Q ubyte ushort uintc ulong ulonglong uint uint8 uint16 uint32 uint64
    i1 i2 i4 i8 b h i l q byte short intc long longlong int int8 int16 int32 int64
    ? b1 bool c8 c16 F D complex64 complex128 complex
    <f4 =f8 |u1 <i8 >f4 >i4 <u8 <f16
""".split()
OWN_NAMES = "f32 f64 fp32 fp64 u16 u32 i32 i64".split()
OWN_MEANING = {"f32": "float32", "f64": "float64", "fp32": "float32", "fp64": "float64", "u16": "uint16",
               "u32": "uint32", "i32": "int32", "i64": "int64"}


def numpy_meaning(name):
    try:
        return np.dtype(name)
    except TypeError:
        return None


def mpsim_reading(name, tmp_path):
    """("read", dtype name) / ("refused", message)."""
    raw = tmp_path / "raw.bin"
    raw.write_bytes(bytes(range(1, 65)))  # 64 bytes: a whole number of elements of every width up to 16
    r = subprocess.run([BIN, "hist", "--dtype", name, str(raw), "--json", "-"], capture_output=True, text=True)
    if r.returncode == 0:
        t = json.loads(r.stdout)["tensors"][0]
        return "read", t["dtype"], t["numel"]
    assert r.returncode == 2, f"--dtype {name}: exit {r.returncode}: {r.stderr}"
    m = re.search(r"holds (\w+) values, not floating point", r.stderr)
    if m:
        return "read", m.group(1), None
    return "refused", r.stderr.strip(), None


def test_numpy_names_mean_numpy_types(tmp_path):
    same = refused = unknown_to_both = 0
    problems = []
    for name in NUMPY_NAMES:
        dt = numpy_meaning(name)
        kind, what, numel = mpsim_reading(name, tmp_path)
        if dt is None:
            unknown_to_both += kind == "refused"
            if kind != "refused":
                problems.append(f"{name}: numpy refuses it, mpsim reads it as {what}")
            continue
        big_endian = dt.byteorder == ">"
        if kind == "read":
            if big_endian or what != dt.name:
                problems.append(f"{name}: numpy {dt.str} ({dt.name}), mpsim reads {what}")
            elif numel is not None and numel != 64 // dt.itemsize:
                problems.append(f"{name}: mpsim read {numel} elements of 64 bytes, numpy's itemsize is {dt.itemsize}")
            else:
                same += 1
        else:
            # A refusal must say what numpy means: the type's name, or big-endian.
            expected = "big-endian" if big_endian else f"numpy's {dt.name}"
            if expected not in what:
                problems.append(f"{name}: numpy {dt.name}; mpsim refuses it without naming {expected}: {what}")
            else:
                refused += 1
    print(f"\n--dtype: {len(NUMPY_NAMES)} names (numpy {np.__version__}): {same} read as numpy's type, {refused} "
          f"refused naming numpy's type, {unknown_to_both} unknown to both; {len(problems)} problems")
    for p in problems:
        print("  " + p)
    assert not problems
    assert same >= 30 and refused >= 20


def test_own_names_are_not_numpy_names(tmp_path):
    problems = []
    for name in OWN_NAMES:
        if numpy_meaning(name) is not None:
            problems.append(f"{name}: numpy reads it as {numpy_meaning(name)}")
        kind, what, _ = mpsim_reading(name, tmp_path)
        if kind != "read" or what != OWN_MEANING[name]:
            problems.append(f"{name}: mpsim: {kind} {what}, expected {OWN_MEANING[name]}")
    print(f"\nmpsim's own --dtype names: {len(OWN_NAMES)} checked, none a numpy name; {len(problems)} problems")
    assert not problems
