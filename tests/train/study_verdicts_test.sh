#!/usr/bin/env bash
# Runs a short loss-scaling study on both models (mpsim study loss-scaling, 2 seeds, a few steps) and
# recomputes its verdicts from the CSVs it wrote with the independent check_study_verdicts.py. Eight of the
# grid's rows (--only): fp32, each policy family, the smallest and largest static scales, and each dynamic
# scaler kind; the whole grid took 53 s of the unit suite, these 8 rows about a third of it.
# Usage: study_verdicts_test.sh MPSIM_BIN PYTHON WORK_DIR
set -euo pipefail
bin=$1 python=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
rows=fp32_none,mixed-bf16_none,mixed-fp16_none,mixed-fp16_static_4,mixed-fp16_static_16777216
rows=$rows,mixed-fp16_dynamic_growth_interval_1,mixed-fp16_hysteresis_deepspeed_growth_interval_1
rows=$rows,pure-fp16_dynamic_growth_interval_1
for model in lstm ssd; do
  "$bin" study loss-scaling --model "$model" --steps 12 --seeds 2 --jobs 2 --only "$rows" --out "$work/$model" >/dev/null
done
# A recipe row whose policy holds commas (nvfp4:rht=0,sr=0,2d=0): summary.csv must quote it, or its columns
# shift and the check cannot find the row's runs. The ssd, 4 steps: about a second.
"$bin" study recipes --model ssd --steps 4 --seeds 2 --jobs 2 --only nvfp4_rht_0_sr_0_2d_0_none \
  --out "$work/recipes" >/dev/null
"$python" "$here/check_study_verdicts.py" "$work/lstm" "$work/ssd" "$work/recipes"
