"""What the torch test files share to run under pytest or as plain scripts (meson runs them as scripts)."""
import sys


def require_torch(module_name):
    """torch, or a skip: exit 77 as a script (meson counts it as skipped), pytest.skip under pytest."""
    try:
        import torch
    except ImportError as e:
        if module_name == "__main__":
            print(f"skipped: torch cannot be imported ({e})")
            sys.exit(77)
        import pytest

        pytest.skip(f"torch cannot be imported ({e})", allow_module_level=True)
    # One thread: the tensors are small, and torch's intra-op workers cost more than they give on a loaded
    # 2-core machine (test_sim_vs_torch under pytest: 79 s with torch's default threads, 7 s with one).
    torch.set_num_threads(1)
    return torch


def run_tests(namespace):
    """Runs every test_* function of a module's namespace, prints the failures; exits 1 if any failed."""
    failed = 0
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
            except AssertionError as e:
                failed += 1
                print(f"FAILED {name}: {e}")
    print("ok" if failed == 0 else f"{failed} failed")
    sys.exit(1 if failed else 0)
