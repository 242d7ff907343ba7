"""The scaling recipes of lib/mpsim/recipe (mpsim._core.Recipe, docs/recipes.md) against torchao 0.18's CPU
quantizers, bit for bit, on GEMM operands (rows x reduction axis) with outliers, zeros, float32 subnormals and
gradient-like magnitudes:

  * fp8-tensorwise-current (HYBRID: e4m3 x / w, e5m2 dy; with and without power-of-two scales) against
    torchao.float8's hp_tensor_to_float8_dynamic with TENSORWISE scaling (float8_scaling_utils.py lines 29-73):
    the scale (Float8TrainingTensor._scale) and the dequantized values (to_original_precision);
  * fp8-rowwise (e4m3, power-of-two scales) against the same with AXISWISE scaling along the reduction axis
    (axiswise_dim=-1), round_scales_to_power_of_2=True, as torchao's ROWWISE recipe (config.py lines 334-351);
  * mxfp8 / mxfp6_e2m3 / mxfp6_e3m2 / mxfp4 (floor and rceil) against torchao.prototype.mx_formats to_mx /
    to_dtype with blocks of 32 along the reduction axis;
  * nvfp4 with its 1D blocks (2d=0, rht=0, sr=0) against NVFP4Tensor.to_nvfp4 with the per-tensor scale.

Operands are kept free of the cases tests/python/test_torchao_blocks.py documents as torchao's departures
(blocks of float32 subnormals only; infinities), which that test checks. Skipped without torch or torchao.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")
from torchao.float8.config import ScalingGranularity  # noqa: E402
from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic  # noqa: E402
from torchao.float8.float8_training_tensor import LinearMMConfig  # noqa: E402
from torchao.prototype.mx_formats import mx_tensor as mx  # noqa: E402
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale  # noqa: E402

from mpsim import _core  # noqa: E402

ROWS, COLS = 48, 256


def operand(seed, lo=-20, hi=4):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((ROWS, COLS)) * np.exp2(rng.uniform(lo, hi, (ROWS, COLS)))).astype(np.float32)
    x[3, 17] = 3.0e4                   # an outlier
    x[5, :] = 0.0                      # an all-zero row
    x[7, 40:60] = 0.0                  # zeros inside a row
    x[9, 3] = np.float32(1e-40)        # float32 subnormals among normal values
    x[9, 4] = np.float32(-3e-42)
    x[11, :] *= np.float32(1e-30)      # a row of tiny values
    return np.ascontiguousarray(x)


def bits_differ(a, b):
    a = np.ascontiguousarray(a, np.float32).view(np.uint32)
    b = np.ascontiguousarray(b, np.float32).view(np.uint32)
    return int(np.count_nonzero(a != b))


@pytest.mark.parametrize("power_2", [False, True])
def test_tensorwise_current_equals_torchao(power_2):
    spec = f"fp8-tensorwise-current:power_2_scales={int(power_2)}"
    total = 0
    for seed, role, dtype in [(1, "fprop_x", torch.float8_e4m3fn), (2, "fprop_w", torch.float8_e4m3fn),
                              (3, "dgrad_dy", torch.float8_e5m2), (4, "wgrad_dy", torch.float8_e5m2)]:
        x = operand(seed)
        got = _core.Recipe(spec).quantize(x, role)
        t = hp_tensor_to_float8_dynamic(torch.from_numpy(x), dtype, LinearMMConfig(),
                                        scaling_granularity=ScalingGranularity.TENSORWISE,
                                        round_scales_to_power_of_2=power_2)
        want = t.to_original_precision().numpy()
        differ = bits_differ(got["values"], want)
        scale_ok = np.float32(got["scales"][0, 0]) == t._scale.item()
        print(f"{spec} {role}: {x.size} values vs torchao ({dtype}), {differ} differ; scale {got['scales'][0, 0]:.9g} "
              f"vs {t._scale.item():.9g}; flushed {got['stats']['underflow']}")
        assert differ == 0 and scale_ok
        total += x.size
    assert total == 4 * ROWS * COLS


def test_rowwise_equals_torchao():
    total_differ = 0
    for seed, role in [(5, "fprop_x"), (6, "fprop_w"), (7, "dgrad_dy"), (8, "wgrad_x")]:
        x = operand(seed, -30, 10)
        got = _core.Recipe("fp8-rowwise").quantize(x, role)
        t = hp_tensor_to_float8_dynamic(torch.from_numpy(x), torch.float8_e4m3fn, LinearMMConfig(),
                                        scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
                                        round_scales_to_power_of_2=True)
        want = t.to_original_precision().numpy()
        want_scales = t._scale.numpy().reshape(ROWS, 1)
        differ = bits_differ(got["values"], want)
        scales_differ = int(np.count_nonzero(got["scales"].astype(np.float32) != want_scales))
        print(f"fp8-rowwise {role}: {x.size} values, {ROWS} row scales vs torchao AXISWISE: {differ} values, "
              f"{scales_differ} scales differ")
        total_differ += differ + scales_differ
    assert total_differ == 0


MX = {"mxfp8": torch.float8_e4m3fn, "mxfp6_e2m3": DTYPE_FP6_E2M3, "mxfp6_e3m2": DTYPE_FP6_E3M2,
      "mxfp4": torch.float4_e2m1fn_x2}


@pytest.mark.parametrize("name", sorted(MX))
@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_recipes_equal_torchao(name, mode):
    x = operand(20 + len(name), -12, 12)
    x[11, :] = operand(99)[11, :]  # torchao departs on blocks of float32 subnormals only (test_torchao_blocks.py)
    got = _core.Recipe(f"{name}:scaling_mode={mode}").quantize(x, "fprop_x")
    mode_t = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    scale, data = mx.to_mx(torch.from_numpy(x), MX[name], 32, mode_t)
    want = mx.to_dtype(data, scale, MX[name], 32, torch.float32).numpy().reshape(ROWS, COLS)
    differ = bits_differ(got["values"], want)
    want_scales = torch.exp2(scale.view(torch.uint8).to(torch.float32) - 127).numpy().reshape(ROWS, COLS // 32)
    scales_differ = int(np.count_nonzero(got["scales"] != want_scales))
    print(f"{name} {mode}: {x.size} values and {want_scales.size} block scales vs torchao to_mx: {differ} values, "
          f"{scales_differ} scales differ; flushed {got['stats']['underflow']}")
    assert differ == 0 and scales_differ == 0


def test_nvfp4_1d_equals_torchao():
    x = operand(40, -8, 8)
    got = _core.Recipe("nvfp4:2d=0,rht=0,sr=0").quantize(x, "fprop_w")
    xt = torch.from_numpy(x)
    t = per_tensor_amax_to_scale(torch.max(torch.abs(xt)))
    want = NVFP4Tensor.to_nvfp4(xt, per_tensor_scale=t).dequantize(torch.float32).numpy()
    differ = bits_differ(got["values"], want)
    print(f"nvfp4 (1D): {x.size} values vs torchao NVFP4Tensor.to_nvfp4: {differ} differ; tensor scale "
          f"{got['tensor_scale']:.9g} vs {t.item():.9g}")
    assert differ == 0
    assert np.float32(got["tensor_scale"]) == t.item()


def test_binding_errors_and_state():
    with pytest.raises(ValueError, match="unknown recipe 'fp8-magic'.*fp8-tensorwise-delayed"):
        _core.Recipe("fp8-magic")
    with pytest.raises(ValueError, match="does not take option 'rht'"):
        _core.Recipe("mxfp8:rht=1")
    r = _core.Recipe("fp8-tensorwise-delayed:amax_history_len=3")
    with pytest.raises(ValueError, match="operand role 'fprop_z'"):
        r.quantize(operand(1), "fprop_z")
    with pytest.raises(ValueError, match="2-D"):
        r.quantize(np.zeros(8, np.float32), "fprop_x")
    x = operand(2)
    r.quantize(x, "fprop_x", "fc")
    r.end_step()
    state = r.state()
    hist, scale = state["fc/x"]
    assert hist[-1] == np.abs(x).max() and scale == np.float32(448.0) / np.float32(np.abs(x).max())
    again = _core.Recipe("fp8-tensorwise-delayed:amax_history_len=3")
    again.set_state(state)
    assert bits_differ(again.quantize(x, "fprop_x", "fc")["values"], r.quantize(x, "fprop_x", "fc")["values"]) == 0
    assert "nvfp4" in _core.recipe_names()
