#!/usr/bin/env bash
# Runs a short loss-scaling study on both models (mpsim study loss-scaling, 2 seeds, a few steps) and
# recomputes its verdicts from the CSVs it wrote with the independent check_study_verdicts.py.
# Usage: study_verdicts_test.sh MPSIM_BIN PYTHON WORK_DIR
set -euo pipefail
bin=$1 python=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
for model in lstm ssd; do
  "$bin" study loss-scaling --model "$model" --steps 12 --seeds 2 --jobs 2 --out "$work/$model" >/dev/null
done
"$python" "$here/check_study_verdicts.py" "$work/lstm" "$work/ssd"
