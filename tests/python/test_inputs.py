"""The command line's inputs as other libraries write them: a .safetensors file from the safetensors library
(PyPI) holding zero-element tensors, which that library loads and `mpsim hist` / `underflow` must read too (a
zero-length data range [b, b) overlaps nothing; lib/mpsim/io/safetensors_reader.cpp)."""
import json
import subprocess

import numpy as np
import pytest

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_zero_element_tensors_in_safetensors(cli, tmp_path):
    # The safetensors library lays tensors out by dtype (widest first), then by name: the empty float64 tensor
    # "z_empty" gets the range [0, 0) where float32 "a" begins, and comes after "a" by name (the order the
    # header lists them in), which is where a reader sorting by begin alone saw an overlap.
    rng = np.random.default_rng(20261128)
    a = (rng.standard_normal(300) * np.exp(rng.normal(-10, 4, 300))).astype(np.float32)
    tensors = {"a": a, "z_empty": np.zeros((0,), np.float64), "m_empty": np.zeros((4, 0), np.float32)}
    path = tmp_path / "empty.safetensors"
    safetensors_numpy.save_file(tensors, str(path))
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    offsets = {k: v["data_offsets"] for k, v in header.items() if k != "__metadata__"}
    print(f"data offsets written by safetensors: {offsets}")
    assert offsets["z_empty"][0] == offsets["z_empty"][1] == offsets["a"][0]

    loaded = safetensors_numpy.load_file(str(path))
    assert {k: v.shape for k, v in loaded.items()} == {k: v.shape for k, v in tensors.items()}
    assert np.array_equal(loaded["a"], a)
    print(f"safetensors loads it: {sorted((k, v.shape) for k, v in loaded.items())}")

    for command in ("hist", "underflow"):
        js = tmp_path / f"{command}.json"
        r = subprocess.run([cli.binary, command, str(path), "--format", "fp16", "--json", str(js)],
                           capture_output=True, text=True)
        print(f"mpsim {command}: exit {r.returncode} {r.stderr.strip()}")
        assert r.returncode == 0, r.stderr
        report = json.loads(js.read_text())
        counts = {t["tensor"].split(":")[-1]: (t["numel"], tuple(t["shape"])) for t in report["tensors"]}
        want = {k: (int(v.size), v.shape) for k, v in tensors.items()}
        print(f"mpsim {command}: (elements, shape) {counts}, numpy's {want}")
        assert counts == want
    # The values themselves, against numpy: fp16 underflow below half its smallest subnormal (2^-25) flushes to 0.
    underflow = json.loads((tmp_path / "underflow.json").read_text())
    row = next(t for t in underflow["tensors"] if t["tensor"].endswith(":a"))
    want_flushed = int(np.sum((a != 0) & (a.astype(np.float16) == 0)))
    print(f"a: {row}; numpy: {want_flushed} nonzero values become 0 in float16")
    assert row["underflows_num"] == want_flushed
