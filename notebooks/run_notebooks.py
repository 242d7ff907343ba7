"""Executes the notebooks headless and checks what they produce.

  run_notebooks.py [--size small|full] [--figures DIR] [--compare DIR] [NAME ...]

For each notebook: runs every cell (nbclient; a failing cell fails the run), then checks that each
expected figure exists as PNG and SVG, that the PNG is a real, non-blank image of a sensible size, and,
with --compare, that the data behind the figure (NAME.data.json) equals the committed data in DIR
(numbers to a relative 1e-9: the data are deterministic, pixels are not compared).
Prints one line per check and ends with "N passed, N failed"; exit status 1 on any failure.
"""
import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# notebook -> figures it must produce
EXPECTED = {
    "01_formats": ["01_formats"],
    "02_gradient_histogram": ["02_gradient_histogram"],
    "03_loss_scaling": ["03_loss_scaling_ssd", "03_loss_scaling_lstm", "03_scale_sweep", "03_paired",
                        "03_dynamic_scale"],
    "04_underflow": ["04_underflow_ssd", "04_underflow_lstm", "04_block_scaling"],
    "05_rounding": ["05_rounding_error", "05_swallowed_updates"],
    "06_pytorch": ["06_pytorch_histogram", "06_pytorch_underflow"],
    "07_pytorch_recipes": ["07_pytorch_recipes"],

    "08_matrix_units": ["08_accumulation_error"],
}


def png_check(path):
    """(ok, message): a PNG that decodes, is at least 300x200 px, and is not one flat colour."""
    import matplotlib.image as mpimg
    import numpy as np

    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return False, "not a PNG file"
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    if w < 300 or h < 200:
        return False, f"too small ({w}x{h})"
    if float(np.std(img[..., :3])) < 1e-3:
        return False, "blank (a single colour)"
    return True, f"{w}x{h}"


def same_data(a, b, path="$"):
    """None if equal (numbers to rel 1e-9), else where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path}: keys differ: {sorted(set(a) ^ set(b))[:5]}"
        for k in a:
            d = same_data(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = same_data(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return None
        if a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)):
            return None
        return f"{path}: {a} != {b}"
    return None if a == b else f"{path}: {a!r} != {b!r}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--figures", default=None, help="where figures go (default notebooks/figures)")
    ap.add_argument("--compare", default=None, help="folder of committed NAME.data.json to compare with")
    ap.add_argument("--work", default=None,
                    help="scratch folder for the mpsim outputs the notebooks make (emptied first)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()

    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    names = args.names or [n for n in EXPECTED if (HERE / f"{n}.ipynb").exists()]
    # The kernels run in notebooks/: paths given relative to the caller's folder are made absolute here.
    env_figures = str(Path(args.figures).resolve()) if args.figures else str(HERE / "figures")
    if args.work:
        args.work = str(Path(args.work).resolve())
    os.environ["MPSIM_NB_SIZE"] = args.size
    if args.work:
        import shutil

        shutil.rmtree(args.work, ignore_errors=True)  # never reuse a stale study
        os.environ["MPSIM_NB_WORK"] = args.work
    os.environ["MPSIM_FIGURES"] = env_figures
    os.environ.setdefault("MPSIM_BIN", str(HERE.parent / "build" / "tools" / "mpsim"))
    passed = failed = 0

    def report(ok, what):
        nonlocal passed, failed
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        if ok:
            passed += 1
        else:
            failed += 1

    for name in names:
        path = HERE / f"{name}.ipynb"
        if not path.exists():
            report(False, f"{name}: notebook missing")
            continue
        nb = nbformat.read(path, as_version=4)
        t0 = time.time()
        # The kernel talks over Unix sockets in a private folder: over TCP without CurveZMQ keys
        # ipykernel prints a plain-text-transport warning for every notebook.
        sockets = tempfile.TemporaryDirectory(prefix="mpsim-kernel-")
        km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets.name, "kernel"))
        try:
            NotebookClient(nb, km=km, timeout=1200, kernel_name="python3",
                           resources={"metadata": {"path": str(HERE)}}).execute()
            report(True, f"{name}: every cell ran ({time.time() - t0:.1f} s)")
        except Exception as e:  # a failing cell: show its error, count the failure, go on
            report(False, f"{name}: a cell failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e!r}")
            print(str(e)[-3000:], file=sys.stderr)
            continue
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=False)
            sockets.cleanup()
        for fig in EXPECTED.get(name, []):
            png = Path(env_figures) / f"{fig}.png"
            svg = Path(env_figures) / f"{fig}.svg"
            if not png.exists() or not svg.exists():
                report(False, f"{fig}: PNG or SVG missing in {env_figures}")
                continue
            ok, msg = png_check(png)
            report(ok, f"{fig}.png: {msg}")
            if args.compare:
                ref = Path(args.compare) / f"{fig}.data.json"
                got = Path(env_figures) / f"{fig}.data.json"
                if not ref.exists() or not got.exists():
                    report(False, f"{fig}: data to compare missing ({ref if not ref.exists() else got})")
                    continue
                diff = same_data(json.loads(got.read_text()), json.loads(ref.read_text()))
                report(diff is None, f"{fig}: data behind the figure equals {ref}" + (f" ({diff})" if diff else ""))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
