"""scripts/tensorboard_export.py on a real `mpsim train` run, read back with TensorBoard's own reader
(EventAccumulator): every scalar equals its steps.csv value (as float32, TensorBoard's scalar type) at every
step, every histogram's buckets equal the hist/*.json binade counts; a run folder without steps.csv exits 2
and writes nothing; a second export into the same logdir leaves one event file. Prints what it compared; exits non-zero on a mismatch.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

MPSIM = os.environ["MPSIM_BIN"]
SCRIPT = os.path.join(os.environ["MPSIM_SOURCE_ROOT"], "scripts", "tensorboard_export.py")


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        subprocess.run([MPSIM, "train", "--model", "lstm", "--policy", "mixed-fp16", "--scaler", "dynamic",
                        "--steps", "4", "--size", "8", "--batch", "2", "--hist-steps", "1,4", "--out", run_dir],
                       check=True, capture_output=True)
        logdir = os.path.join(tmp, "tb")
        subprocess.run([sys.executable, SCRIPT, run_dir, "--logdir", logdir], check=True)
        # A second export into the same logdir replaces the first: one event file, each step once. A foreign
        # event file in the logdir stays.
        foreign = os.path.join(logdir, "events.out.tfevents.0.elsewhere")
        open(foreign, "wb").close()
        subprocess.run([sys.executable, SCRIPT, run_dir, "--logdir", logdir], check=True)
        exports = [n for n in os.listdir(logdir) if n.startswith("events.out.tfevents") and n != os.path.basename(foreign)]
        print(f"after two exports into one logdir: {len(exports)} export event file(s), foreign file kept: "
              f"{os.path.exists(foreign)}")
        if len(exports) != 1 or not os.path.exists(foreign):
            failures += 1
        os.remove(foreign)
        acc = EventAccumulator(logdir, size_guidance={"scalars": 0, "histograms": 0})
        acc.Reload()
        tags = acc.Tags()
        with open(os.path.join(run_dir, "steps.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        compared = 0
        for column in rows[0]:
            if column == "step":
                continue
            tag = f"underflow/{column.rsplit(':', 1)[0]}/{column.rsplit(':', 1)[1]}" if ":" in column else column
            want = {int(r["step"]): np.float32(float(r[column])) for r in rows if r[column] != ""}
            got = {e.step: np.float32(e.value) for e in acc.Scalars(tag)} if tag in tags["scalars"] else {}
            same = want.keys() == got.keys() and all(
                (np.isnan(want[s]) and np.isnan(got[s])) or want[s] == got[s] for s in want)
            if not same:
                print(f"MISMATCH scalar {tag}: want {want}, got {got}")
                failures += 1
            compared += len(want)
        print(f"scalars: {compared} values of {len(rows[0]) - 1} columns x {len(rows)} steps compared")
        buckets = 0
        histograms = 0
        for name in sorted(os.listdir(os.path.join(run_dir, "hist"))):
            with open(os.path.join(run_dir, "hist", name)) as f:
                snap = json.load(f)
            for group in ("activation_grad", "weight_grad", "master_grad"):
                for site, hist in snap[group].items():
                    want = [(float(n + 1), float(c)) for n, c in hist["bins"] if c > 0]
                    events = [e for e in acc.Histograms(f"{group}/{site}") if e.step == snap["step"]] \
                        if f"{group}/{site}" in tags["histograms"] else []
                    if not want:
                        continue
                    got = list(zip(events[0].histogram_value.bucket_limit, events[0].histogram_value.bucket)) \
                        if len(events) == 1 else None
                    if got != want:
                        print(f"MISMATCH histogram {group}/{site} at step {snap['step']}: want {want}, got {got}")
                        failures += 1
                    buckets += len(want)
                    histograms += 1
        print(f"histograms: {histograms} histograms, {buckets} buckets compared")
        if histograms == 0 or compared == 0:
            failures += 1
        # A folder that is not a run: exit 2, one message, no event file.
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        r = subprocess.run([sys.executable, SCRIPT, empty, "--logdir", os.path.join(tmp, "tb2")],
                           capture_output=True, text=True)
        print(f"not a run: exit {r.returncode}: {r.stderr.strip()}")
        if r.returncode != 2 or "steps.csv" not in r.stderr or os.path.exists(os.path.join(tmp, "tb2")):
            failures += 1
    print("ok" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
