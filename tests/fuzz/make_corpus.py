#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/), built with the
standard library only (struct, zipfile, json) so it is independent of mpsim's own writers."""
import glob
import io
import json
import os
import struct
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr, shape, payload, fortran=False, major=1):
    shape_txt = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_txt)
    prefix = 10 if major == 1 else 12
    pad = (-(prefix + len(header) + 1)) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    lenfield = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + lenfield + header + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


f32 = struct.pack("<6f", 1.0, -2.0, 0.5, 1e-40, float("inf"), 3.0)
samples = {
    "f32_2x3": npy("<f4", (2, 3), f32),
    "f16": npy("<f2", (3,), struct.pack("<3H", 0x3C00, 0x0001, 0x7C00)),
    "f64_0d": npy("<f8", (), struct.pack("<d", 0.1)),
    "f64_be_fortran": npy(">f8", (2, 2), struct.pack(">4d", 1, 3, 2, 4), fortran=True),
    "u8": npy("|u1", (4,), bytes([0, 0x38, 0x7E, 0xFF])),
    "u16_v2": npy("<u2", (2,), struct.pack("<2H", 0x3F80, 1), major=2),
    "i64_v3": npy("<i8", (1,), struct.pack("<q", -5), major=3),
    "u32_i32": npy("<u4", (2, 1), struct.pack("<2I", 7, 8)),
    "i32": npy("<i4", (2,), struct.pack("<2i", -1, 1)),
    "empty": npy("<f4", (3, 0), b""),
}
for name, data in samples.items():
    write("npy", name + ".npy", data)

for name, comp in [("stored", zipfile.ZIP_STORED), ("deflate", zipfile.ZIP_DEFLATED)]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=comp) as z:
        z.writestr("weights.npy", samples["f32_2x3"])
        z.writestr("half.npy", samples["f16"])
        z.writestr("fortran.npy", samples["f64_be_fortran"])
    write("npz", name + ".npz", buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("a.npy", samples["u8"], compress_type=zipfile.ZIP_STORED)
    z.writestr("b.npy", samples["f64_0d"], compress_type=zipfile.ZIP_DEFLATED)
write("npz", "mixed.npz", buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    pass
write("npz", "empty.npz", buf.getvalue())


def safetensors(tensors, meta=None):
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


write("safetensors", "all_dtypes.safetensors", safetensors({
    "a": ("F32", [2, 3], f32),
    "h": ("F16", [2], struct.pack("<2H", 0x3C00, 0x7BFF)),
    "b": ("BF16", [2], struct.pack("<2H", 0x3F80, 0x4049)),
    "e": ("F8_E4M3", [2, 1], bytes([0x38, 0x7E])),
    "m": ("F8_E5M2", [2], bytes([0x3C, 0x7B])),
    "d": ("F64", [], struct.pack("<d", 0.1)),
    "i": ("I64", [1], struct.pack("<q", 3)),
}, meta={"format": "pt"}))
write("safetensors", "one.safetensors", safetensors({"w": ("F32", [1], struct.pack("<f", 1.0))}))
write("safetensors", "empty.safetensors", safetensors({}))


# Training checkpoints (lib/mpsim/train/checkpoint.hpp): metadata values are JSON texts; data_crc32 is the
# CRC-32 of the tensors' values in the order of "tensors"; metadata_crc32 that of the header's compact JSON
# with sorted keys, less itself (absent in checkpoints of earlier versions).
def checkpoint(tensors, header, with_metadata_crc=True):
    header = dict(header, format="mpsim training checkpoint", schema="mpsim-checkpoint-1",
                  tensors=[name for name, _ in tensors])
    header["data_crc32"] = "%08x" % zlib.crc32(b"".join(struct.pack("<%df" % len(v), *v) for _, v in tensors))
    if with_metadata_crc:
        text = json.dumps(header, sort_keys=True, separators=(",", ":"))
        header["metadata_crc32"] = "%08x" % zlib.crc32(text.encode())
    meta = {k: json.dumps(v, separators=(",", ":")) for k, v in header.items()}
    # Laid out in reverse order, as another writer might: the reader goes by the tensor list.
    return safetensors({name: ("F32", [len(v)], struct.pack("<%df" % len(v), *v)) for name, v in reversed(tensors)},
                       meta=meta)


ck_tensors = [("param/w", [1.0, -2.0, 0.5]), ("optimizer/0", [0.0, 1e-3, 3.0])]
ck_header = {"step": 3, "model": "lstm", "scaler_state": {"scale": 4096, "growth_factor": 2, "_growth_tracker": 1}}
write("checkpoint", "current.safetensors", checkpoint(ck_tensors, ck_header))
write("checkpoint", "earlier_version.safetensors", checkpoint(ck_tensors, ck_header, with_metadata_crc=False))
write("checkpoint", "no_tensors.safetensors", checkpoint([], {"step": 0}))

# torch.amp.GradScaler.state_dict() as json.dump writes it (torch/amp/grad_scaler.py, state_dict).
for name, state in {
    "default": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                "_growth_tracker": 0},
    "grown": {"scale": 1.5e-5, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7,
              "_growth_tracker": 6},
    "disabled": {},
}.items():
    write("scaler_state", name + ".json", json.dumps(state).encode())

# Hardware recordings (`mpsim verify --against`): the first run of each committed recording, its digests and
# two listed mismatches (the rest of the run's notes left out to stay under the fuzzer's 8 KiB inputs).
for path in sorted(glob.glob(os.path.join(HERE, "..", "..", "data", "hardware", "*", "*.json"))):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("kind") not in ("convert", "arith"):
        continue
    run = doc["runs"][0]
    keep = {k: run[k] for k in ("name", "hw_digests", "emu_digests") if k in run}
    keep["first_mismatches"] = [{k: m[k] for k in ("index", "hw")} for m in run.get("first_mismatches", [])[:2]]
    seed = {k: doc[k] for k in ("schema", "kind", "profile", "block_elements")}
    seed["runs"] = [keep]
    write("recording", doc["kind"] + ".json", json.dumps(seed, separators=(",", ":")).encode())
