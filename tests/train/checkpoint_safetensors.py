"""A training checkpoint opened with the safetensors package (safetensors.numpy.load_file), as a user would.

Runs `mpsim train` (the binary in $MPSIM_BIN), then checks, with safetensors and numpy only:
  * every tensor loads as float32 and equals the bytes parsed here from the file's own layout;
  * every metadata value is JSON text, and the step and the scaler state read back;
  * re-saved by safetensors.numpy.save_file with nothing changed (its own byte layout), it resumes exactly like
    the original;
  * the scaler state is a torch.amp.GradScaler.state_dict(): its five keys with the Python types that
    GradScaler.state_dict's docstring gives (torch/amp/grad_scaler.py), fed back to `mpsim train
    --scaler-state` it seeds a run whose scaler spec carries the same values.
torch itself is not installed here, so GradScaler.load_state_dict is not called.
Prints what it compared; exits non-zero on any mismatch.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

MPSIM = os.environ["MPSIM_BIN"]
TRAIN = ["train", "--model", "lstm", "--policy", "mixed-fp16", "--steps", "3", "--size", "8", "--batch", "2"]


def run(args):
    r = subprocess.run([MPSIM] + args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"mpsim {' '.join(args)} failed ({r.returncode}): {r.stderr}")


def check_resaved(path, tmp):
    """The checkpoint loaded and saved again by the safetensors library, nothing changed (save_file lays the
    tensors out in its own order): mpsim resumes from it exactly as from the original."""
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata()
    tensors = load_file(path)
    resaved = os.path.join(tmp, "resaved.safetensors")
    save_file(tensors, resaved, metadata=metadata)
    raw, again = open(path, "rb").read(), open(resaved, "rb").read()
    print(f"re-saved by safetensors: {len(tensors)} tensors, bytes identical: {raw == again}")
    outs = {}
    for name, ck in (("from_original", path), ("from_resaved", resaved)):
        outs[name] = os.path.join(tmp, name)
        longer = TRAIN[:TRAIN.index("--steps")] + ["--steps", "5"] + TRAIN[TRAIN.index("--steps") + 2:]
        run(longer + ["--scaler", "dynamic,init_scale=4096,growth_interval=2", "--resume", ck, "--out", outs[name]])
    same_csv = open(os.path.join(outs["from_original"], "steps.csv")).read() == \
        open(os.path.join(outs["from_resaved"], "steps.csv")).read()
    a = load_file(os.path.join(outs["from_original"], "checkpoint.safetensors"))
    b = load_file(os.path.join(outs["from_resaved"], "checkpoint.safetensors"))
    same_tensors = a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    print(f"resumed to step 5 from each: steps.csv identical {same_csv}, {len(a)} final tensors identical {same_tensors}")
    return 0 if (same_csv and same_tensors and raw != again) else 1


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        run(TRAIN + ["--scaler", "dynamic,init_scale=4096,growth_interval=2", "--out", out])
        path = os.path.join(out, "checkpoint.safetensors")
        tensors = load_file(path)
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        meta = header.pop("__metadata__")
        values = 0
        for name, entry in header.items():
            b, e = entry["data_offsets"]
            want = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4")
            got = tensors[name]
            if got.dtype != np.float32 or got.shape != tuple(entry["shape"]) or got.tobytes() != want.tobytes():
                print(f"MISMATCH {name}: {got.dtype} {got.shape}")
                failures += 1
            values += got.size
        print(f"safetensors.numpy.load_file: {len(tensors)} tensors, {values} float32 values compared, "
              f"{failures} mismatches")
        state = {k: json.loads(v) for k, v in meta.items()}
        print(f"metadata keys: {sorted(state)}")
        if state["step"] != 3 or sorted(state["tensors"]) != sorted(tensors):
            print(f"MISMATCH step {state['step']} or tensor list {state['tensors']}")
            failures += 1
        scaler = state["scaler_state"]
        print(f"scaler_state: {scaler}")
        types = {"scale": float, "growth_factor": float, "backoff_factor": float, "growth_interval": int,
                 "_growth_tracker": int}
        for key, kind in types.items():
            if type(scaler.get(key)) is not kind:
                print(f"MISMATCH scaler_state[{key!r}] = {scaler.get(key)!r}, GradScaler.state_dict() has a {kind.__name__}")
                failures += 1
        # The state as torch would hold it (only its five keys), back into mpsim.
        torch_state = {k: scaler[k] for k in types}
        state_file = os.path.join(tmp, "state.json")
        with open(state_file, "w") as f:
            json.dump(torch_state, f)
        seeded = os.path.join(tmp, "seeded")
        run(TRAIN + ["--scaler-state", state_file, "--out", seeded])
        spec = json.load(open(os.path.join(seeded, "run.json")))["config"]["scaler_spec"]
        want = (f"dynamic,init_scale={torch_state['scale']:g},growth_factor={torch_state['growth_factor']:g},"
                f"backoff_factor={torch_state['backoff_factor']:g},growth_interval={torch_state['growth_interval']}")
        if torch_state["_growth_tracker"]:
            want += f",init_growth_tracker={torch_state['_growth_tracker']}"
        print(f"seeded run's scaler: {spec} (want {want})")
        if spec != want:
            failures += 1
        failures += check_resaved(path, tmp)
    print("ok" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
