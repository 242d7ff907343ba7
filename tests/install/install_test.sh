#!/usr/bin/env bash
# `meson install` into a temporary root, then the example consumer (examples/consumer) built against that
# tree with nothing but `pkg-config --cflags --libs mpsim`, run on a .npy, and its output checked:
# the installed headers, the one archive (every layer, the vector kernels inside) and mpsim.pc suffice.
# Usage: install_test.sh BUILD_DIR SOURCE_ROOT
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" >/dev/null
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
pc=$(find "$tmp/root" -name mpsim.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: meson install put no mpsim.pc under $tmp/root"; exit 1; }
echo "installed: $(find "$tmp/root" -type f | wc -l) files; $pc"

# mpsim.pc is relocatable (meson.build: pkgconfig.relocatable): its prefix is found from where the file
# lies, so the staged tree works as it is, and fmt's and Eigen's flags stay the system's.
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs mpsim)
echo "pkg-config --cflags --libs mpsim: $flags"
case "$flags" in *"$src"*) echo "FAIL: the flags point into the source tree"; exit 1 ;; esac
headers=""
for f in $flags; do
  case "$f" in -I*|-L*) [ -d "${f:2}" ] || { echo "FAIL: $f is not a folder"; exit 1; } ;; esac
  case "$f" in -I"$tmp"*) [ -f "${f:2}/mpsim/format/round.hpp" ] && headers=${f:2} ;; esac
done
[ -n "$headers" ] || { echo "FAIL: no -I for the installed headers"; exit 1; }
# Internal headers (lib/mpsim/**/detail/) are not installed, and every public header's own includes of mpsim
# headers resolve inside the installed tree (a public header including a detail/ one would break consumers).
inc=$headers/mpsim
installed=$(find "$inc" -name '*.hpp' | wc -l)
detail=$(find "$inc" -path '*/detail/*' | wc -l)
source_public=$(cd "$src/lib" && find mpsim -name '*.hpp' -not -path '*/detail/*' | wc -l)
source_detail=$(cd "$src/lib" && find mpsim -name '*.hpp' -path '*/detail/*' | wc -l)
echo "headers: $installed installed of $source_public public in lib/ ($source_detail under detail/ in lib/, $detail installed)"
[ "$detail" -eq 0 ] || { echo "FAIL: detail/ headers installed:"; find "$inc" -path '*/detail/*'; exit 1; }
[ "$source_detail" -gt 0 ] || { echo "FAIL: no detail/ header in lib/: the check above tests nothing"; exit 1; }
[ "$installed" -ge "$source_public" ] || { echo "FAIL: $installed headers installed, $source_public public"; exit 1; }
missing=0
while IFS= read -r h; do
  for dep in $(sed -n 's/^#include "\(mpsim\/[^"]*\)".*/\1/p' "$h"); do
    [ -f "$headers/$dep" ] || { echo "FAIL: ${h#$headers/} includes $dep, which is not installed"; missing=1; }
  done
done < <(find "$inc" -name '*.hpp')
[ "$missing" -eq 0 ] || exit 1
echo "every #include \"mpsim/...\" of the installed headers resolves in the installed tree"
${CXX:-c++} -std=c++20 -O1 "$src/examples/consumer/consumer.cpp" $flags -o "$tmp/consumer"

# Input: a float32 .npy of 3 values written by hand (numpy's format 1.0: magic, header padded to 64 bytes).
python3 - "$tmp/x.npy" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
header += " " * (64 - 10 - len(header) - 1) + "\n"
data = struct.pack("<3f", 1.0, 1e-8, 1e5)
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
PY
out=$("$tmp/consumer" "$tmp/x.npy")
echo "consumer: $out"
# 1 is exact in fp16, 1e-8 underflows (below 2^-25), 1e5 overflows (above 65520).
want="3 values to fp16: 2 rounded, 1 underflow, 1 overflow; binades -27..16; 0 mismatches against round_bits"
[ "$out" = "$want" ] || { echo "FAIL: expected: $want"; exit 1; }
[ -f "$tmp/x.npy.fp16.npy" ] || { echo "FAIL: the consumer wrote no output"; exit 1; }
echo "PASS: the example consumer built against the installed tree and ran"
