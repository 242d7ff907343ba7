#!/usr/bin/env python3
"""Converts an external exhaustive probe's recording (the H100 probe's JSON, see its README) into the
project's recorded-hardware schema (data/hardware/README.md, schema mpsim-hw-1): convert.json and
arith.json with the per-block digests of the hardware's outputs for tests/kernels/recorded_test.cpp and
`mpsim verify --against`, and unary.json with the unary intrinsics' summary.

Usage: scripts/hardware_from_probe.py PROBE.json OUT_DIR
The probe's run names are mapped to the project's (kernels/runs_host.hpp); its counts are against a
textbook IEEE reference, so they are stored as `textbook_*` (not the project's `mismatches`, which count
differences from the emulation). Only the standard library is used, so no venv is needed.
"""
import json
import os
import sys
import tempfile

# probe op -> project run name (kernels/runs_host.hpp convert_runs() / arith_runs())
CONVERT = {
    "f32_to_f16_rn": "fp16_rn", "f32_to_f16_rz": "fp16_rz", "f32_to_f16_rd": "fp16_rd", "f32_to_f16_ru": "fp16_ru",
    "f32_to_bf16_rn": "bf16_rn", "f32_to_bf16_rz": "bf16_rz", "f32_to_bf16_rd": "bf16_rd", "f32_to_bf16_ru": "bf16_ru",
    "f32_to_e4m3_nosat": "fp8_e4m3_nosat", "f32_to_e4m3_satfinite": "fp8_e4m3_satfinite",
    "f32_to_e5m2_nosat": "fp8_e5m2_nosat", "f32_to_e5m2_satfinite": "fp8_e5m2_satfinite",
    "f32_to_tf32_rna": "tf32_rna", "f32_to_tf32_rn": "tf32_rn", "f32_to_tf32_rz": "tf32_rz",
    "f32_to_tf32_rna_satfinite": "tf32_rna_satfinite",
    "f64_to_f16_rn": "fp64_fp16_rn", "f64_to_bf16_rn": "fp64_bf16_rn",
}
ARITH_FORMATS = {"f16": "fp16", "bf16": "bf16"}
FIRST_PER_CLASS = 4  # of the probe's 16: enough to show each kind of difference, small files


def slug(name):
    out = ""
    for c in name.lower():
        if c.isalnum():
            out += c
        elif out and out[-1] != "-":
            out += "-"
    return out.strip("-")


def version(v):
    return f"{v // 1000}.{(v % 1000) // 10}"


def device(probe):
    return {
        "name": probe["device"], "slug": slug(probe["device"]), "compute_capability": probe["compute_capability"],
        "multiprocessors": probe["sms"], "driver_cuda_version": version(probe["cuda_driver"]),
        "runtime_cuda_version": version(probe["cuda_runtime"]), "nvcc": probe["nvcc"], "date": probe["utc"],
    }


def provenance(probe, src):
    return {
        "recorded_by": "an external stand-alone probe (" + probe["tool"] + ") that ran each intrinsic on every input "
                       "and kept order-free per-block digests of the hardware's outputs; converted by "
                       "scripts/hardware_from_probe.py",
        "source_file": os.path.basename(src),
        "digest_formula": probe["digest_formula"],
        "probe_seconds": probe["total_seconds"],
    }


def run_entry(op, name):
    first = []
    for cls, items in op["first_mismatches"].items():
        for m in items[:FIRST_PER_CLASS]:
            first.append({"class": cls, "index": int(m["i"], 16), "input": m["in"], "hw": m["hw"],
                          "textbook": m["ref"]})
    return {
        "name": name, "intrinsic": op["intrinsic"], "index": op["index"], "elements": op["inputs"],
        "textbook": op["reference"], "textbook_mismatches": op["mismatches"],
        "textbook_mismatches_ignoring_nan_payload": op["mismatches_ignoring_nan_payload"],
        "textbook_mismatch_classes": {k: v for k, v in op["classes"].items()},
        "hw_nan_outputs": op["hw_nan_outputs"], "hw_nan_pattern_count": op["hw_nan_pattern_count"],
        "hw_nan_patterns_first": op["hw_nan_patterns"][:8],
        "first_mismatches": first, "hw_digests": op["digest_hw"],
    }


def write_json(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: scripts/hardware_from_probe.py PROBE.json OUT_DIR")
    src, out = argv[1], argv[2]
    with open(src) as f:
        probe = json.load(f)
    dev = device(probe)
    base = {"schema": "mpsim-hw-1", "device": dev, "profile": "cuda-sm90", "block_elements": 1 << 24,
            "provenance": provenance(probe, src)}
    convert, arith = [], []
    for op in probe["ops"]:
        if op["op"] in CONVERT:
            convert.append(run_entry(op, CONVERT[op["op"]]))
        elif op["group"].startswith("arith"):
            fmt, rest = op["op"].split("_", 1)
            arith.append(run_entry(op, ARITH_FORMATS[fmt] + "_" + rest))
        else:
            sys.exit(f"{src}: unknown probe op '{op['op']}' (add it to the tables of this script)")
    unary = [{k: u[k] for k in ("format", "op", "intrinsic", "inputs", "correctly_rounded", "cr_exact",
                                "nan_both", "nan_mismatch", "max_abs_ulp_distance", "max_error_ulps_of_exact",
                                "ulp_distance_hist")} for u in probe["unary"]]
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "convert.json"), dict(base, kind="convert", runs=convert))
    write_json(os.path.join(out, "arith.json"), dict(base, kind="arith", runs=arith))
    write_json(os.path.join(out, "unary.json"), dict(base, kind="unary", runs=unary))
    print(f"{out}: {len(convert)} conversion runs, {len(arith)} arithmetic runs, {len(unary)} unary functions")


if __name__ == "__main__":
    main(sys.argv)
