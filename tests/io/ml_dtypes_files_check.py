#!/usr/bin/env python3
"""ml_dtypes arrays read as numpy and safetensors write them, through the mpsim command line.

For every ml_dtypes element type: an array holding every value of the type (and random draws) is written by
numpy + ml_dtypes as .npy (header '<V1' / '<V2'), as a member of an .npz beside a float32 member, and, for
the types safetensors names (BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0), as a safetensors
file. `mpsim hist --format fp32 --dtype TYPE FILE --json` must then report what numpy computes from the
ml_dtypes array itself: element, zero, NaN and ±inf counts, the largest and smallest non-zero magnitude, and
the count in every log2 binade. Reading a void array without --dtype, or with a --dtype of another width,
must fail with exit status 2 and a message naming the header and --dtype.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import ml_dtypes
except ImportError:
    sys.exit("ml_dtypes_files_check: ml_dtypes is not installed in this Python; run ./run deps")

# ml_dtypes name -> safetensors dtype name (safetensors/src/tensor.rs), where safetensors has one.
TYPES = {
    "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0", "float8_e4m3": None, "float8_e3m4": None,
    "float8_e4m3b11fnuz": None, "float6_e2m3fn": None, "float6_e3m2fn": None, "float4_e2m1fn": None,
}


def expected(a):
    """What hist must report for ml_dtypes array a, computed by numpy from a's float64 values."""
    v = a.astype(np.float64).ravel()
    finite = v[np.isfinite(v)]
    nz = np.abs(finite[finite != 0])
    exps, counts = np.unique(np.floor(np.log2(nz)).astype(int), return_counts=True)
    return {"numel": v.size, "zero": int((finite == 0).sum()), "nan": int(np.isnan(v).sum()),
            "pos_inf": int((v == np.inf).sum()), "neg_inf": int((v == -np.inf).sum()),
            "amax": float(nz.max()), "amin": float(nz.min()), "bins": {int(e): int(c) for e, c in zip(exps, counts)}}


def reported(t):
    h = t["histogram"]
    return {"numel": t["numel"], "zero": h["zero"], "nan": h["nan"], "pos_inf": h["pos_inf"],
            "neg_inf": h["neg_inf"], "amax": t["cur_amax"], "amin": t["nonzero_amin"],
            "bins": {int(e): int(c) for e, c in h["bins"]}}


def write_safetensors(path, name, a, st_dtype):
    raw = a.view(np.uint8 if a.dtype.itemsize == 1 else np.uint16).tobytes()
    header = json.dumps({name: {"dtype": st_dtype, "shape": list(a.shape), "data_offsets": [0, len(raw)]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + raw)


def hist(mpsim, path, dtype, work):
    out = os.path.join(work, "hist.json")
    args = [mpsim, "hist", "--format", "fp32", path, "--json", out] + (["--dtype", dtype] if dtype else [])
    p = subprocess.run(args, capture_output=True, text=True)
    return p, (json.load(open(out)) if p.returncode == 0 else None)


def main():
    mpsim = os.environ.get("MPSIM_BIN") or (sys.argv[1] if len(sys.argv) > 1 else None)
    if not mpsim:
        sys.exit("ml_dtypes_files_check: set MPSIM_BIN or pass the mpsim executable")
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}")
    rng = np.random.default_rng(7)
    failures = files = 0
    with tempfile.TemporaryDirectory(prefix="mpsim-ml-files-") as work:
        for name, st_dtype in TYPES.items():
            t = getattr(ml_dtypes, name)
            st = np.uint16 if ml_dtypes.finfo(t).bits > 8 else np.uint8
            every = np.arange(1 << ml_dtypes.finfo(t).bits, dtype=np.uint32).astype(st).view(t)
            draws = rng.standard_normal(3000).astype(np.float32).astype(t)
            a = np.concatenate([every, draws]).reshape(-1, 8)  # 2^k + 3000 values: a whole number of rows
            want = expected(a)
            paths = {}
            paths["npy"] = os.path.join(work, f"{name}.npy")
            np.save(paths["npy"], a)
            paths["npz"] = os.path.join(work, f"{name}.npz")
            np.savez(paths["npz"], values=a)
            if st_dtype:
                paths["safetensors"] = os.path.join(work, f"{name}.safetensors")
                write_safetensors(paths["safetensors"], "values", a, st_dtype)
            for kind, path in paths.items():
                files += 1
                p, report = hist(mpsim, path, None if kind == "safetensors" else name, work)
                if p.returncode != 0:
                    print(f"{name:20s} {kind:11s}: mpsim failed ({p.returncode}): {p.stderr.strip()}")
                    failures += 1
                    continue
                got = reported(report["tensors"][0])
                diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
                print(f"{name:20s} {kind:11s} {want['numel']:6d} values, {len(want['bins'])} binades, "
                      f"amax {want['amax']:g}: {'match' if not diff else f'MISMATCH {diff}'}")
                failures += bool(diff)
            # The errors: no --dtype, and a --dtype of another width.
            header = "V2" if st is np.uint16 else "V1"
            other = "float8_e4m3fn" if st is np.uint16 else "bfloat16"
            for dtype in (None, other):
                p, _ = hist(mpsim, paths["npy"], dtype, work)
                ok = p.returncode == 2 and header in p.stderr and "--dtype" in p.stderr
                files += 1
                print(f"{name:20s} npy --dtype {dtype}: exit {p.returncode}, "
                      f"{'clear error' if ok else 'WRONG: ' + p.stderr.strip()}")
                failures += not ok
    print(f"{files} reads checked, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
