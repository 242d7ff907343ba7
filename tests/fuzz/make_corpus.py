#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/), built with the
standard library only (struct, zipfile, json) so it is independent of mpsim's own writers."""
import io
import json
import os
import struct
import zipfile

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
