#!/bin/bash
# Prepares the GPU checks for a machine with an NVIDIA GPU but without this repository's build dependencies
# (a lent device: CUDA, Python 3.12 and torch there, no Eigen / fmt / CLI11): builds here what runs there and
# copies it into .gpu/ (ignored by git): mpsim, mpsim-hw and test_kernels_gpu (sm_90), libfmt, and the
# Python extension for the device's Python (MPSIM_GPU_PYTHON, default Python 3.12 from pyenv).
# Then run `bash scripts/gpu_checks.sh` there with .gpu carried along; docs/hardware.md says what it records.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${MPSIM_GPU_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python3}
[ -x "$PY" ] || { echo "gpu_checks_prepare: no Python at $PY (set MPSIM_GPU_PYTHON to the device's Python version)" >&2; exit 2; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
ninja -C build tools/mpsim tools/mpsim-hw tests/kernels/test_kernels_gpu
[ -x build/tests/kernels/test_kernels_gpu ] || { echo "gpu_checks_prepare: build/ has no CUDA kernels (nvcc not found?)" >&2; exit 2; }
"$PY" -m pip install -q nanobind setuptools numpy
B=build-py$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
[ -d "$B" ] || CCACHE_NOHASHDIR=1 meson setup "$B" -Dpython_exe="$PY" -Dbuildtype=debugoptimized \
  -Dbenchmarks=false -Dtests=false >/dev/null
CCACHE_NOHASHDIR=1 ninja -C "$B" python-module
rm -rf .gpu && mkdir -p .gpu/lib .gpu/py/mpsim
cp build/tools/mpsim build/tools/mpsim-hw build/tests/kernels/test_kernels_gpu .gpu/
strip .gpu/mpsim .gpu/mpsim-hw .gpu/test_kernels_gpu
cp "$B"/python/mpsim/_core.*.so .gpu/py/mpsim/ && strip .gpu/py/mpsim/_core.*.so
cp -L "$(ldd build/tools/mpsim | awk '/libfmt/ {print $3}')" .gpu/lib/
du -sh .gpu
