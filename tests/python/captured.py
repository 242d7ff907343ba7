"""Helpers shared by the monitor tests: tensors captured with plain forward and tensor hooks, and numpy's
binning of them, the independent side of the monitor's histograms."""
import numpy as np


def capture_outputs(model, indices):
    """Registers hooks on model[i] for i in indices; returns the dict they fill on the next forward and
    backward: "{i}/out" (the module's output) and "{i}/out_grad" (the gradient that reaches it), cloned."""
    captured = {}

    def capture(i):
        def hook(module, inputs, out):
            captured[f"{i}/out"] = out.detach().clone()
            out.register_hook(lambda g: captured.__setitem__(f"{i}/out_grad", g.clone()))
        return hook

    for i in indices:
        model[i].register_forward_hook(capture(i))
    return captured


def numpy_bins(values):
    """{n: count} of 2^n <= |x| < 2^(n+1) over the non-zero finite values (np.frexp's exponent minus one),
    for a torch tensor on any device (copied to the host)."""
    v = np.asarray(values.detach().double().cpu().flatten())
    v = v[np.isfinite(v) & (v != 0)]
    _, e = np.frexp(np.abs(v))
    n, c = np.unique(e - 1, return_counts=True)
    return {int(a): int(b) for a, b in zip(n, c)}
