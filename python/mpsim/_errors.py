"""The exception types of misuse, one per kind, raised alike by mpsim and mpsim.torch (docs/python.md#errors).

Each derives from the built-in type the first releases raised for that misuse (a wrong device was a TypeError
in mpsim.round and a ValueError in mpsim.torch, so UnsupportedDeviceError is both): code that caught those
keeps working, and new code can catch the one named type.
"""


class UnsupportedDeviceError(TypeError, ValueError):
    """A tensor on a device whose memory cannot be read (torch's meta device holds no values), or `out=` on
    another device than the input."""


class UnsupportedLayoutError(TypeError, ValueError):
    """A tensor that is not dense and strided (sparse COO / CSR / ..., mkldnn): convert it with .to_dense()."""


class UnsupportedDtypeError(TypeError):
    """A dtype mpsim does not round or count (integers, booleans, complex numbers, ...)."""


class RequiresGradError(RuntimeError):
    """Writing rounded values into a tensor that requires grad while autograd records (out=, in-place): the
    write would happen behind autograd's back. torch refuses an in-place op on such a leaf with a
    RuntimeError; round inside torch.no_grad(), into a tensor that does not require grad, or use
    mpsim.torch.quantize for a differentiable rounding."""
