"""The stats of a rounding done by torch operations (python/mpsim/_device.py, the path of tensors off the CPU) carry
the library's Stats field names in the library's order (lib/mpsim/format/stats_fields.hpp, the one table), and the
values mpsim.round computes in C++ for the same rounding."""
import numpy as np
import pytest
import torch

import mpsim
from mpsim import _core, _device


def edge_tensor(n=5000, seed=3):
    """Log-uniform magnitudes 2^-30 .. 2^20 of both signs with ±0, float32 subnormals, fp16's flush tie 2^-25 and
    overflow boundary 65520, e4m3's 448 / 464 / 480, ±inf and NaN among them."""
    g = np.random.default_rng(seed)
    v = np.exp2(g.uniform(-30, 20, n)) * np.where(g.random(n) < 0.5, -1, 1)
    edges = [0.0, -0.0, 1e-45, -1e-40, 2.0**-25, -(2.0**-25), 65504.0, 65520.0, -65520.0, 448.0, 464.0, 480.0,
             np.inf, -np.inf, np.nan]
    return torch.from_numpy(np.concatenate([v, edges]).astype(np.float32))


def test_device_stats_take_the_librarys_field_table():
    x = edge_tensor()
    compared = 0
    for fmt, options in (("fp16", {}), ("bf16", {}), ("fp8_e4m3", {}), ("fp8_e5m2", {}),
                         ("fp8_e4m3", {"overflow": "saturate"})):
        want_values, want = mpsim.round(x, fmt, stats=True, **options)
        f = mpsim.Format(fmt).with_options(**{"subnormals": "keep", "overflow": "inf", **options})
        got = _device.stats_of(x, want_values, f)
        # The same names in the same order as the C++ dict and the table, and the same values.
        assert tuple(want) == _core._stats_fields, (tuple(want), _core._stats_fields)
        assert tuple(got) == _core._stats_fields, (tuple(got), _core._stats_fields)
        assert got == want, (fmt, options, got, want)
        compared += 1
    print(f"stats fields {list(_core._stats_fields)}: torch-operation stats equal mpsim.round's (names, order, "
          f"values) for {compared} formats over {x.numel()} values with every edge")


def test_a_field_the_table_gains_fails_by_name(monkeypatch):
    x = edge_tensor(100)
    y, _ = mpsim.round(x, "fp16", stats=True)
    monkeypatch.setattr(_core, "_stats_fields", _core._stats_fields + ("new_field",))
    with pytest.raises(RuntimeError, match="new_field"):
        _device.stats_of(x, y, mpsim.Format("fp16"))
    print("a field the table gains and stats_of does not compute: RuntimeError naming it")
