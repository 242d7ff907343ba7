"""Checks on the tensors mpsim.torch hands to mpsim: one clear exception naming the tensor, never a crash."""
import torch

# Exact widenings: every fp16 / bf16 value is a float32 value, so counting the float32 copy counts the same
# numbers (a real torch.autocast run hands the monitor fp16 / bf16 gradients).
_WIDEN_EXACTLY = (torch.float16, torch.bfloat16)


def check_float_tensor(t, what):
    """Raises unless t is a dense CPU float32 / float64 tensor (what mpsim.round takes)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{what}: a tensor on {t.device}; mpsim works on CPU tensors (move it with .cpu())")
    if t.layout != torch.strided:
        raise ValueError(f"{what}: a {t.layout} tensor; mpsim needs a dense (strided) tensor (.to_dense())")
    if t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{what}: dtype {t.dtype} is not supported; mpsim rounds float32 or float64 tensors "
                        f"(keep the model in float32: the emulation does the low-precision rounding)")


def values_to_count(t, what):
    """t's values as a contiguous float32 / float64 numpy array for the counters: a view of t's memory (a
    copy only where t is not contiguous or is fp16 / bf16, which widen exactly). A numpy view, made once,
    spares each of the counters its own DLPack exchange (about 20 us per call, what a small tensor's count
    costs)."""
    if isinstance(t, torch.Tensor) and t.dtype in _WIDEN_EXACTLY and t.device.type == "cpu":
        t = t.float()
    check_float_tensor(t, what)
    return t.detach().contiguous().numpy()
