#!/bin/bash
# The GPU checks in one run (about 85 s on an H200), from .gpu/ made by scripts/gpu_checks_prepare.sh:
# device info, test_kernels_gpu, every exhaustive conversion and arithmetic run recorded (--record), the
# recorded-only runs compared on the CPU, the CUDA tests of tests/python/test_torch_device.py, GEMM against
# the matrix-unit models, unary, histogram, bandwidth, and compute-sanitizer memcheck. Writes $OUT/log.txt,
# $OUT/rec/<device>/*.json (copy those into data/hardware/<device>/ to keep them) and $OUT/gemm-dump.tar (each
# GEMM kernel's raw C at 256^3: `mpsim hw gemm --dump`).
set -u
cd "$(dirname "$0")/.."
G=$PWD/.gpu
OUT=${OUT:-$PWD/gpu-checks}
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
REC=$OUT/rec
mkdir -p "$REC"
t0=$(date +%s)
step() { echo; echo "=== $* (t=$(( $(date +%s) - t0 )) s)"; }
{
step machine; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
ldd "$G/mpsim-hw" | grep -i "not found\|cublas\|cudart"
step info; timeout 60 "$G/mpsim-hw" hw info
step test_kernels_gpu; MPSIM_SOURCE_ROOT=$PWD timeout 180 "$G/test_kernels_gpu" --durations yes
step convert; timeout 180 "$G/mpsim-hw" hw convert --record "$REC"
step arith; timeout 240 "$G/mpsim-hw" hw arith --record "$REC"
D=$(ls -d "$REC"/*/ 2>/dev/null | head -1)
step "recorded-only runs against the emulation, on the CPU"
for r in tf32_rna tf32_rn tf32_rz tf32_rna_satfinite fp64_fp16_rn fp64_bf16_rn; do
  timeout 120 "$G/mpsim" verify --against "$D" --only "$r" --threads 0 | tail -n 1
done
step "python: tests/python/test_torch_device.py"
PYTHONPATH=$PWD/python:$G/py PYTHONUNBUFFERED=1 MPSIM_BIN=$G/mpsim timeout 120 python3 -m pytest -q \
  -p no:cacheprovider -rs tests/python/test_torch_device.py 2>&1 | tail -n 40
step gemm; timeout 240 "$G/mpsim-hw" hw gemm --shape 256x256x256 --shape 1024x1024x1024 --shape 128x128x4096 \
  --record "$REC"
step "gemm outputs of 256x256x256 (raw float32, for the models to be fitted on a CPU)"
# One tar (a lent device returns at most 8 files: log.txt, the 5 recordings and this).
DUMP=$(mktemp -d) && timeout 60 "$G/mpsim-hw" hw gemm --shape 256x256x256 --dump "$DUMP" | tail -n 5 &&
  tar cf "$OUT/gemm-dump.tar" -C "$DUMP" . && rm -rf "$DUMP"
step "SASS of the tensor-core kernels (which instructions WMMA and mma.sync became)"
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
[ -x "$CUOBJDUMP" ] && "$CUOBJDUMP" -sass "$G/test_kernels_gpu" | awk '/Function :/ {fn=$3} /HMMA|QMMA|IMMA/ {
  match($0, /[HQI]MMA[.A-Z0-9]*/); print fn, substr($0, RSTART, RLENGTH)}' | sort | uniq -c | grep -i 'mma_\|wmma' || echo "no cuobjdump"
step unary; timeout 60 "$G/mpsim-hw" hw unary --json "${D:-$REC/}unary.json"
step hist; timeout 60 "$G/mpsim-hw" hw hist
step bench; timeout 90 "$G/mpsim-hw" hw bench --record "$REC"
step memcheck; timeout 120 compute-sanitizer --tool memcheck --print-limit 10 "$G/test_kernels_gpu" 2>&1 | tail -n 6
step done
} > "$OUT/log.txt" 2>&1
tail -n 5 "$OUT/log.txt"
