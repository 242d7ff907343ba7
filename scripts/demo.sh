#!/usr/bin/env bash
# The main job (./run demo): the loss-scaling study on both models at their default size, then where
# the reports are. Usage: scripts/demo.sh OUT_DIR   (MPSIM_BIN: the mpsim executable; ./run sets it)
set -euo pipefail
out=${1:?usage: scripts/demo.sh OUT_DIR}
bin=${MPSIM_BIN:-build/tools/mpsim}
mkdir -p "$out"
start=$(date +%s)
for model in lstm ssd; do
  echo "== loss-scaling study: $model" >&2
  "$bin" study loss-scaling --model "$model" --out "$out/study-$model" --jobs "$(nproc)"
done
"$bin" formats --json "$out/formats.json" >/dev/null
end=$(date +%s)
echo
echo "demo finished in $((end - start)) s. Reports:"
for model in lstm ssd; do
  echo "  $out/study-$model/summary.md   (summary.json; per-run steps.csv, run.json, hist/ under runs/)"
done
