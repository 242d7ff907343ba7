#!/usr/bin/env python3
"""Exports an `mpsim train` run folder to a TensorBoard event file.

    .venv/bin/python scripts/tensorboard_export.py RUN_DIR [--logdir DIR]   (default DIR: RUN_DIR/tensorboard)
    tensorboard --logdir DIR

What it writes, step by step:
  * scalars from steps.csv: loss, metric (at the evaluated steps), scale, skipped, grad_norm, and for every
    activation-gradient rounding site S the fractions S:zero, S:subnormal, S:overflow as
    underflow/S/zero, underflow/S/subnormal, underflow/S/overflow;
  * histograms from hist/step_NNNNNN.json: activation_grad/S, weight_grad/S and master_grad/P on the
    log2|x| axis, one bucket per binade (bucket [n, n+1) holds the values with floor(log2|x|) = n, as
    mpsim's Log2Histogram counts them; zeros, inf and NaN have no place on that axis and are left out).

Events go through tensorboard's own event-file writer (tensorboard.summary.writer.event_file_writer, the
writer torch.utils.tensorboard.SummaryWriter uses) as Summary protos, so no deep-learning framework is needed.
A malformed run folder gets one message naming the file and exit status 2. An export into a logdir that holds
an earlier one replaces it (this script's event files end in .mpsim-export; other event files are left alone).
"""
import argparse
import csv
import glob
import json
import os
import sys
import time

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.histogram import metadata as histogram_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class BadRun(Exception):
    pass


# The end of the event files this script writes (EventFileWriter's filename_suffix), so that a new export can
# find and replace the previous one without touching other event files in the logdir.
EXPORT_SUFFIX = ".mpsim-export"


def scalar_summary(tag, value):
    meta = scalar_metadata.create_summary_metadata(display_name=tag, description="")
    return summary_pb2.Summary.Value(tag=tag, simple_value=value, metadata=meta)


def histogram_summary(tag, hist, description):
    """A Summary value of the binade counts of one mpsim Log2Histogram (its JSON), on the log2|x| axis."""
    bins = [(int(n), int(c)) for n, c in hist["bins"] if int(c) > 0]
    if not bins:
        return None
    num = sum(c for _, c in bins)
    # Each value stands at its binade's middle, n + 0.5, for the summary fields TensorBoard shows.
    total = sum((n + 0.5) * c for n, c in bins)
    squares = sum((n + 0.5) ** 2 * c for n, c in bins)
    proto = summary_pb2.HistogramProto(
        min=float(bins[0][0]), max=float(bins[-1][0] + 1), num=float(num), sum=total, sum_squares=squares,
        bucket_limit=[float(n + 1) for n, _ in bins], bucket=[float(c) for _, c in bins])
    meta = histogram_metadata.create_summary_metadata(display_name=tag, description=description)
    return summary_pb2.Summary.Value(tag=tag, histo=proto, metadata=meta)


def read_steps(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise BadRun(f"{path}: cannot read ({e.strerror})") from e
    if not rows or "step" not in rows[0] or "loss" not in rows[0]:
        raise BadRun(f"{path}: not an mpsim steps.csv (no step and loss columns)")
    return rows


def scalar_tag(column):
    if ":" in column:
        site, kind = column.rsplit(":", 1)
        return f"underflow/{site}/{kind}"
    return column


def export(run_dir, logdir):
    rows = read_steps(os.path.join(run_dir, "steps.csv"))
    snapshots = []
    for path in sorted(glob.glob(os.path.join(run_dir, "hist", "step_*.json"))):
        try:
            with open(path) as f:
                snap = json.load(f)
            step = int(snap["step"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BadRun(f"{path}: not an mpsim histogram snapshot ({e})") from e
        snapshots.append((step, path, snap))

    # Every event is built (and the inputs checked) before the event file is opened: a bad run leaves no file.
    events = []
    scalars = histograms = 0
    now = time.time()
    for line, row in enumerate(rows, start=2):
        try:
            step = int(row["step"])
            values = [scalar_summary(scalar_tag(k), float(v)) for k, v in row.items() if k != "step" and v not in ("", None)]
        except ValueError as e:
            raise BadRun(f"{os.path.join(run_dir, 'steps.csv')}: line {line}: {e}") from e
        events.append(event_pb2.Event(step=step, wall_time=now, summary=summary_pb2.Summary(value=values)))
        scalars += len(values)
    note = "log2|x| of the values, one bucket per binade (zeros, inf and NaN left out)"
    for step, path, snap in snapshots:
        values = []
        for group in ("activation_grad", "weight_grad", "master_grad"):
            for name, hist in snap.get(group, {}).items():
                try:
                    v = histogram_summary(f"{group}/{name}", hist, note)
                except (KeyError, TypeError, ValueError) as e:
                    raise BadRun(f"{path}: {group}/{name}: not a histogram ({e})") from e
                if v is not None:
                    values.append(v)
        events.append(event_pb2.Event(step=step, wall_time=now, summary=summary_pb2.Summary(value=values)))
        histograms += len(values)
    # An export replaces the previous one in the same logdir (TensorBoard would draw both, step over step). Ours
    # are told apart by their name's suffix; the old ones go only once the new file is complete.
    earlier = set(glob.glob(os.path.join(glob.escape(logdir), "events.out.tfevents.*" + EXPORT_SUFFIX)))
    writer = EventFileWriter(logdir, filename_suffix=EXPORT_SUFFIX)
    for event in events:
        writer.add_event(event)
    writer.close()
    # (Two exports within one second by processes of the same PID get the same name: the file was overwritten.)
    written = os.path.abspath(getattr(writer, "_file_name", ""))
    for path in earlier:
        if os.path.abspath(path) != written:
            os.remove(path)
    return scalars, histograms, len(snapshots)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="an `mpsim train --out` folder (steps.csv, hist/)")
    ap.add_argument("--logdir", help="where the event file goes (default: RUN_DIR/tensorboard)")
    args = ap.parse_args(argv)
    logdir = args.logdir or os.path.join(args.run_dir, "tensorboard")
    try:
        scalars, histograms, snaps = export(args.run_dir, logdir)
    except BadRun as e:
        print(f"tensorboard_export: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {scalars} scalars and {histograms} histograms ({snaps} snapshots) to {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
