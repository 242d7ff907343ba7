"""A torch.amp.GradScaler state round-tripped through `mpsim train --scaler-state` and back into torch.

1. A real GradScaler("cpu") is stepped with finite and inf gradients (torch's own unscale / skip / update), its
   state_dict() saved as JSON (json.dump, as a user would);
2. `mpsim train` starts from it (lstm, mixed-fp16, a few steps: the state's scale overflows fp16, so the
   simulator backs off and skips steps);
3. the scaler state mpsim saved in its checkpoint (safetensors metadata "scaler_state") is loaded into a fresh
   GradScaler with load_state_dict(), and its fields are checked against the saved values;
4. torch replays the run: a GradScaler loaded with the state of step 1 is stepped with an inf gradient on every
   step mpsim skipped (steps.csv) and a finite one otherwise; the scale of every step and the final state
   (scale, growth_factor, backoff_factor, growth_interval, _growth_tracker) must equal mpsim's exactly;
5. bad states: each key of the real state_dict removed, or given a wrong type, exits 2 with a message naming
   the key and the file, and leaves no output directory.
Runs under pytest, or as a script printing what it compared.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_main import require_torch, run_tests  # noqa: E402

torch = require_torch(__name__)

MPSIM = os.environ.get("MPSIM_BIN", "mpsim")
TRAIN = ["train", "--model", "lstm", "--policy", "mixed-fp16", "--steps", "8", "--size", "8", "--batch", "2",
         "--seed", "1"]
KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def scaler_step(scaler, finite):
    """One optimiser step through the scaler with a finite or an inf gradient."""
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    w = torch.tensor([1.0, 2.0]) if finite else torch.tensor([float("inf"), 2.0])
    scaler.scale((p * w).sum()).backward()
    scaler.step(opt)
    scaler.update()


def torch_state():
    """A GradScaler stepped finite, inf, finite, finite: a non-default scale, tracker and interval."""
    # init_scale 2^23, 2^22 after the inf step: above what the lstm's fp16 gradients stand (they overflow
    # from about 2^20, lib/mpsim/models/README.md), so mpsim's run starts by backing off; growth_interval 3
    # so that a growth, and the overflow after it, show within 8 steps.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 23, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=3)
    for finite in (True, False, True, True):
        scaler_step(scaler, finite)
    return scaler.state_dict()


def run(args):
    return subprocess.run([MPSIM] + args, capture_output=True, text=True)


def read_checkpoint_meta(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return {k: json.loads(v) for k, v in header["__metadata__"].items()}


def test_round_trip():
    state = torch_state()
    print(f"torch GradScaler('cpu') after 4 steps (finite, inf, finite, finite): state_dict() = {state}")
    assert state["scale"] == 2.0 ** 22 and state["_growth_tracker"] == 2
    with tempfile.TemporaryDirectory() as tmp:
        state_file = os.path.join(tmp, "state.json")
        with open(state_file, "w") as f:
            json.dump(state, f)
        out = os.path.join(tmp, "run")
        r = run(TRAIN + ["--scaler-state", state_file, "--out", out])
        assert r.returncode == 0, f"mpsim train failed ({r.returncode}): {r.stderr}"
        saved = read_checkpoint_meta(os.path.join(out, "checkpoint.safetensors"))["scaler_state"]
        print(f"mpsim's saved scaler_state after {TRAIN[TRAIN.index('--steps') + 1]} steps: {saved}")

        fresh = torch.amp.GradScaler("cpu")
        fresh.load_state_dict(saved)
        loaded = fresh.state_dict()
        print(f"a fresh GradScaler after load_state_dict(): {loaded}")
        mismatches = [k for k in KEYS if loaded[k] != saved[k] or type(loaded[k]) is not type(state[k])]

        with open(os.path.join(out, "steps.csv")) as f:
            steps = list(csv.DictReader(f))
        replay = torch.amp.GradScaler("cpu")
        replay.load_state_dict(state)
        for row in steps:
            if float(row["scale"]) != replay.get_scale():
                mismatches.append(f"step {row['step']}: mpsim's scale {row['scale']}, torch's {replay.get_scale()}")
            scaler_step(replay, finite=row["skipped"] == "0")
        skipped = [row["step"] for row in steps if row["skipped"] == "1"]
        print(f"mpsim skipped steps {skipped} of {len(steps)}; scales {[float(r['scale']) for r in steps]}")
        final = replay.state_dict()
        print(f"torch replaying those steps from the same state: {final}")
        mismatches += [f"final {k}: mpsim {saved[k]!r}, torch {final[k]!r}" for k in KEYS if final[k] != saved[k]]
        grew = any(float(b["scale"]) > float(a["scale"]) for a, b in zip(steps, steps[1:]))
        assert skipped and grew, "the run must back off and grow for the replay to exercise both"
        print(f"{len(KEYS)} fields loaded, {len(steps)} step scales and {len(KEYS)} final fields compared with torch, "
              f"{len(mismatches)} mismatches")
        assert not mismatches, mismatches


def test_bad_states():
    state = torch_state()
    cases = []
    for key in KEYS:
        missing = {k: v for k, v in state.items() if k != key}
        cases.append((f"without {key}", missing, [f'"{key}"']))
        wrong = dict(state)
        wrong[key] = str(state[key])  # e.g. "33554432.0": a string where torch has a number
        cases.append((f"{key} as a string", wrong, [f'"{key}"', "string"]))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, bad, wants in cases:
            path = os.path.join(tmp, "bad.json")
            with open(path, "w") as f:
                json.dump(bad, f)
            out = os.path.join(tmp, "bad_run")
            r = run(TRAIN + ["--scaler-state", path, "--out", out])
            msg = r.stderr.strip()
            print(f"{label}: exit {r.returncode}: {msg}")
            if r.returncode != 2 or "bad.json" not in msg or not all(w in msg for w in wants) or os.path.exists(out):
                failures.append(label)
    print(f"{len(cases)} bad states, {len(failures)} failures")
    assert not failures, failures


if __name__ == "__main__":
    run_tests(globals())
