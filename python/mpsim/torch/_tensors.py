"""Checks on the tensors mpsim.torch hands to mpsim: one clear exception naming the tensor, never a crash; the
exception types are mpsim's (UnsupportedDeviceError, UnsupportedLayoutError, UnsupportedDtypeError), the
same as mpsim.round raises for the same misuse."""
import torch

from mpsim import UnsupportedDeviceError, UnsupportedDtypeError, UnsupportedLayoutError

# Exact widenings: every fp16 / bf16 value is a float32 value, so counting the float32 copy counts the same
# numbers (a real torch.autocast run hands the monitor fp16 / bf16 gradients).
_WIDEN_EXACTLY = (torch.float16, torch.bfloat16)


def check_readable(t, what):
    """Raises unless t is a dense tensor on a device with memory (any but meta)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise UnsupportedDeviceError(f"{what}: a tensor on meta, which holds no values; mpsim works on tensors on "
                                     f"devices with memory (cpu, cuda, ...)")
    if t.layout != torch.strided:
        raise UnsupportedLayoutError(f"{what}: a {t.layout} tensor; mpsim needs a dense (strided) tensor "
                                     f"(.to_dense())")


def check_float_tensor(t, what):
    """Raises unless t is a dense float32 / float64 tensor on a device with memory (what mpsim.round takes)."""
    check_readable(t, what)
    if t.dtype not in (torch.float32, torch.float64):
        raise UnsupportedDtypeError(f"{what}: dtype {t.dtype} is not supported; mpsim rounds float32 or float64 "
                                    f"tensors (keep the model in float32: the emulation does the low-precision "
                                    f"rounding)")


def values_to_count(t, what, on_device=False):
    """t's values for the counters. On the CPU (unless on_device): a contiguous float32 / float64 numpy array,
    a view of t's memory (a copy only where t is not contiguous or is fp16 / bf16, which widen exactly); a
    numpy view, made once, spares each of the counters its own DLPack exchange (about 20 us per call, what a
    small tensor's count costs). Elsewhere (or with on_device): the detached tensor itself, on its device,
    for the torch-op counting (_device_counts.py)."""
    if (not on_device and type(t) is torch.Tensor and t.dtype is torch.float32 and t.is_cpu
            and t.layout is torch.strided):
        # The monitor's usual tensor (a float32 CPU gradient), which passes every check below: taken without
        # them (they cost a few us per tensor and sampled step, docs/performance.md).
        return t.detach().contiguous().numpy()
    check_readable(t, what)
    if t.dtype in _WIDEN_EXACTLY:
        t = t.float()
    check_float_tensor(t, what)
    if on_device or t.device.type != "cpu":
        return t.detach()
    return t.detach().contiguous().numpy()
