"""mpsim.dumps (python/mpsim/dumps.py) against `mpsim hist --json` / `mpsim underflow --json` on the same values: a
generated tree of dumps (Transformer Engine's layout as .pt files, .npy, .npz, .safetensors, two unreadable files)
analysed on a dask.distributed LocalCluster of 2 worker processes and on Dask's local schedulers; per tensor, per
layer, per step and in total, equal to the command line's JSON field for field."""
import json
import logging
import math
import os
import subprocess

import numpy as np
import pytest


torch = pytest.importorskip("torch")
pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
from safetensors.torch import save_file  # noqa: E402

from mpsim import dumps  # noqa: E402

RNG_SEED = 20261128


def gradient(rng, shape, centre, dtype):
    """Values like gradients: log-normal magnitudes over many binades around 2^centre, some zeros."""
    n = int(np.prod(shape))
    x = rng.standard_normal(n) * np.exp2(rng.normal(centre, 5, n))
    x[rng.random(n) < 0.02] = 0
    return torch.from_numpy(x.reshape(shape)).to(dtype)


class QuantizedStandIn:
    """A pickled object of a class torch.load(weights_only=True) does not allow, like TE's QuantizedTensor."""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The dump tree, and beside it `twins`: for each readable dump file, the files the command line reads in its
    place with the same values ({dump name: (twin path, {twin label: dump label})})."""
    base = tmp_path_factory.mktemp("dumps")
    root, twin_dir = base / "run", base / "twins"
    twin_dir.mkdir()
    rng = np.random.default_rng(RNG_SEED)
    twins = {}

    def twin_safetensors(name, tensors):
        path = twin_dir / (name.replace("/", "__") + ".safetensors")
        save_file({k or "value": v.contiguous() for k, v in tensors.items()}, str(path))
        twins[name] = (str(path), {f"{path}:{k or 'value'}": f"{name}:{k}" if k else name for k in tensors})

    def write(name, save, tensors, cli_reads_it=False):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        save(str(path))
        if cli_reads_it:
            labels = {f"{path}:{k}" if k else str(path): f"{name}:{k}" if k else name for k in tensors}
            twins[name] = (str(path), labels)
        else:
            twin_safetensors(name, tensors)

    # Transformer Engine's DumpTensors files: tensor_dumps/rank_<r>/<layer>_<tensor>_iter_<N:06d>.pt, each a dict
    # {"high_precision": tensor} (transformer_engine/debug/features/dump_tensors.py); bf16 and fp32.
    for rank in (0, 1):
        for step in (1, 2):
            for layer, tensor, dtype, centre in [("layers_0_fc1", "gradient", torch.bfloat16, -20),
                                                 ("layers_1_fc2", "gradient", torch.float32, -26),
                                                 ("layers_1_fc2", "activation", torch.bfloat16, -2)]:
                name = f"tensor_dumps/rank_{rank}/{layer}_{tensor}_iter_{step:06d}.pt"
                t = {"high_precision": gradient(rng, (16, 24), centre - step, dtype)}
                write(name, lambda p, t=t: torch.save(t, p), t)
    # The nested layout rank_<r>/iter_<N>/<layer>_<tensor>.pt, one bare tensor per file (float16).
    t = {"": gradient(rng, (300,), -18, torch.float16)}
    write("tensor_dumps/rank_0/iter_000003/layers_0_fc1_wgrad.pt", lambda p: torch.save(t[""], p), t)
    # Other layouts: numpy and safetensors files, named by their paths.
    a = gradient(rng, (50, 20), -14, torch.float64)
    write("other/grads.npy", lambda p: np.save(p, a.numpy()), {"": a}, cli_reads_it=True)
    npz = {"w": gradient(rng, (40,), -10, torch.float32), "h": gradient(rng, (8, 8), -12, torch.float16)}
    write("other/state.npz", lambda p: np.savez(p, w=npz["w"].numpy(), step=np.int64(7), h=npz["h"].numpy()), npz,
          cli_reads_it=True)
    st = {"e4m3": gradient(rng, (64,), -4, torch.float8_e4m3fn), "b": gradient(rng, (30, 3), -30, torch.bfloat16),
          "f": gradient(rng, (100,), -8, torch.float32)}
    write("other/model.safetensors", lambda p: save_file(st, p), st, cli_reads_it=True)
    # Edges: an empty tensor, 0-d ones (-0.0 among them), NaN, +-inf, values past fp8 e4m3's max and below its
    # smallest subnormal.
    edges = {"empty": torch.zeros(0, 3, dtype=torch.float64), "negzero": torch.tensor(-0.0, dtype=torch.float64),
             "special": torch.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0, 448.0, 464.0, 1e4, 2.0**-10, 2.0**-12],
                                     dtype=torch.float32)}
    write("other/edges.npz", lambda p: np.savez(p, **{k: v.numpy() for k, v in edges.items()}), edges,
          cli_reads_it=True)
    # A zero-element safetensors tensor (its data_offsets [n, n]) after the file's other tensor: the command line
    # takes it there (at the start offset of another tensor it reports an overlap, which safetensors allows).
    tail = {"a": gradient(rng, (3,), 0, torch.float32), "z_empty": torch.zeros(0, 5)}
    write("other/tail_empty.safetensors", lambda p: save_file(tail, p), tail, cli_reads_it=True)
    scalar = {"": torch.tensor(3.5)}
    write("other/scalar.pt", lambda p: torch.save(scalar[""], p), scalar)
    # Unreadable: a TE file holding an object beside its tensor (as its "quantized" QuantizedTensor), which
    # weights_only=True refuses; garbage under a .pt name, an .npy cut short; and a file that is not a dump.
    torch.save({"high_precision": torch.ones(4), "quantized": QuantizedStandIn()},
               str(root / "tensor_dumps" / "rank_1" / "layers_0_fc1_gradient_iter_000003.pt"))
    (root / "other" / "broken.pt").write_bytes(b"not a torch file")
    np.save(root / "other" / "short.npy", np.ones(1000, np.float32))
    with open(root / "other" / "short.npy", "r+b") as f:
        f.truncate(300)
    (root / "other" / "notes.txt").write_text("a log, not a dump\n")
    return str(root), twins


MASS_LOST_KEYS = ("mass_nonzero_num", "mass_flushed_num", "l1_lost", "l2sq_lost", "cosine")


def cli_report(mpsim_bin, command, twins, names, options, out):
    """`mpsim COMMAND` on the twins of the dump files `names` with the labels mapped to the dumps'."""
    files = [twins[n][0] for n in names]
    labels = {k: v for n in names for k, v in twins[n][1].items()}
    r = subprocess.run([mpsim_bin, command, *files, "--json", out, *options], capture_output=True, text=True)
    assert r.returncode == 0, f"mpsim {command} exited {r.returncode}: {r.stderr}"
    report = json.load(open(out))
    for t in report["tensors"]:
        t["tensor"] = labels[t["tensor"]]
    return report


def without_dump_fields(report):
    r = {k: v for k, v in report.items() if k not in ("files", "skipped_files", "failed", "by")}
    r["tensors"] = [{k: v for k, v in t.items() if k != "dump"} for t in report["tensors"]]
    return r


def as_total(entry):
    """A group's entry as the command line's total over the group's files (which has no shape or dtype)."""
    return {k: v for k, v in entry.items() if k not in ("tensor", "shape", "dtype")}


FORMAT, MODE, LOG2_SCALE = "fp8_e4m3", "rne", 4
OPTIONS = {"hist": ["--format", FORMAT, "--scale", str(2**LOG2_SCALE)],
           "underflow": ["--format", FORMAT, "--mode", MODE, "--scale", str(2**LOG2_SCALE), "--sweep"]}


def reports(report, by=None):
    return {"hist": report.hist(LOG2_SCALE, by=by), "underflow": report.underflow(LOG2_SCALE, sweep=True, by=by)}


@pytest.fixture(scope="module")
def cluster_report(tree):
    """The tree analysed on a LocalCluster of 2 worker processes, with the tasks each worker ran."""
    root, _ = tree
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            report = dumps.analyse(root, FORMAT, MODE, client=client, mass_log2_scales=(LOG2_SCALE,),
                                   by=("layer", "step", "rank", "tensor", ("layer", "step")))
        workers = {}
        for task in stream.data:
            workers[task["worker"]] = workers.get(task["worker"], 0) + 1
        pids = client.run(os.getpid)
    return report, workers, pids


def test_cluster_equals_cli(tree, cluster_report, mpsim_bin, tmp_path):
    root, twins = tree
    report, workers, pids = cluster_report
    print(f"LocalCluster: {len(pids)} worker processes (pids {sorted(pids.values())}, this one {os.getpid()}); tasks "
          f"run per worker: {sorted(workers.values())}")
    assert len(pids) == 2 and os.getpid() not in pids.values()
    assert len(workers) == 2, f"the tasks ran on {len(workers)} worker(s), not both"
    names = [f.name for f in report.files if f.name in twins]
    assert len(report.files) == len(twins) + 3  # the three unreadable files; notes.txt is not a dump
    for command, got in reports(report).items():
        want = cli_report(mpsim_bin, command, twins, names, OPTIONS[command], str(tmp_path / f"{command}.json"))
        assert want.pop("failed") == []  # the command line was given the readable files only
        assert without_dump_fields(got) == want
        if command == "underflow":  # the gradient mass lost compared too, and something to compare
            assert all(k in got["total"] for k in MASS_LOST_KEYS) and got["total"]["mass_flushed_num"] > 0
            print(f"underflow: the mass lost compared per tensor and in total: {got['total']['mass_flushed_num']} "
                  f"of {got['total']['mass_nonzero_num']} values flushed, l1_lost {got['total']['l1_lost']:.6g}, "
                  f"l2sq_lost {got['total']['l2sq_lost']:.6g}, cosine {got['total']['cosine']!r}")
        assert got["skipped_files"] == 3 and got["files"] == len(names) + 3
        print(f"{command}: {len(got['tensors'])} tensors of {len(names)} files, per tensor and total equal to "
              f"`mpsim {command} --json` field for field ({sum(t['numel'] for t in got['tensors'])} values)")


@pytest.mark.parametrize("by", ["layer", "step", "rank", "tensor", "layer,step"])
def test_groups_equal_cli_over_each_group(tree, cluster_report, mpsim_bin, tmp_path, by):
    """Each group's entry (merged in Dask's tree on the workers) equals the command line's total over the group's
    files; the report's total, the command line's over every file."""
    root, twins = tree
    report = cluster_report[0]
    values = {}
    for f in report.files:
        if f.name in twins:
            values.setdefault(tuple(getattr(f, c) for c in by.split(",")), []).append(f.name)
    compared = 0
    for command, got in reports(report, by).items():
        entries = {t["tensor"]: t for t in got["tensors"]}
        assert len(entries) == len(values)
        for value, names in values.items():
            want = cli_report(mpsim_bin, command, twins, names, OPTIONS[command], str(tmp_path / "g.json"))
            label = "/".join("(none)" if v is None else str(v) for v in value)
            assert as_total(entries[label]) == as_total(want["total"])
            compared += 1
        everything = cli_report(mpsim_bin, command, twins, [f.name for f in report.files if f.name in twins],
                                OPTIONS[command], str(tmp_path / "all.json"))
        assert got["total"] == everything["total"]
    print(f"by {by}: {len(values)} groups ({sorted(entries)}), {compared} group entries equal to the "
          f"command line's total over the group's files, hist and underflow")


def test_local_schedulers_give_the_same(tree, cluster_report):
    root, _ = tree
    # The merges form a tree: with 2-way merges over one partition per file, ceil(log2(files)) levels of them.
    files = cluster_report[0].files
    _, groups = dumps.graph(files, FORMAT, MODE, split_every=2)
    levels = {k[0] if isinstance(k, tuple) else k for k in groups.__dask_graph__()
              if "_merge_groups-aggregate" in (k[0] if isinstance(k, tuple) else k)}  # the last one: a bare key
    assert len(levels) == math.ceil(math.log2(len(files))), levels
    print(f"{len(files)} files, 2-way merges: {len(levels)} levels of merge tasks")
    want = {**reports(cluster_report[0]), **{f"{k}-layer": v for k, v in reports(cluster_report[0], "layer").items()}}
    for scheduler, files_per_task, split_every in [("threads", 1, 2), ("sync", 3, 4)]:
        r = dumps.analyse(root, FORMAT, MODE, scheduler=scheduler, files_per_task=files_per_task,
                          split_every=split_every, by=("layer",), mass_log2_scales=(LOG2_SCALE,))
        got = {**reports(r), **{f"{k}-layer": v for k, v in reports(r, "layer").items()}}
        assert got == want
        print(f"scheduler {scheduler}, {files_per_task} file(s) per task, {split_every}-way merges: the reports equal "
              f"the LocalCluster's")


def test_unreadable_files_reported(tree, cluster_report):
    report = cluster_report[0]
    failed = {f["input"]: f["error"] for f in report.failed}
    print("failed:", failed)
    te = "tensor_dumps/rank_1/layers_0_fc1_gradient_iter_000003.pt"
    assert sorted(failed) == ["other/broken.pt", "other/short.npy", te]
    for name, error in failed.items():
        assert error.startswith(name + ": ") and len(error) > len(name) + 2
    assert "weights_only" in failed[te] and "QuantizedStandIn" in failed[te]
    assert report.skipped == 3
    read = {e.file.name for e in report.entries}
    assert not read & set(failed) and len(read) == len(report.files) - 3


def test_columns_from_the_layout(tree, cluster_report):
    report = cluster_report[0]
    by_name = {f.name: f for f in report.files}
    f = by_name["tensor_dumps/rank_1/layers_1_fc2_activation_iter_000002.pt"]
    assert (f.rank, f.step, f.layer, f.tensor, f.kind) == (1, 2, "layers_1_fc2", "activation", "pt")
    f = by_name["tensor_dumps/rank_0/iter_000003/layers_0_fc1_wgrad.pt"]
    assert (f.rank, f.step, f.layer, f.tensor) == (0, 3, "layers_0_fc1", "wgrad")
    f = by_name["other/state.npz"]
    assert (f.rank, f.step, f.layer, f.tensor) == (None, None, None, "other/state.npz")
    assert "other/notes.txt" not in by_name
    rows = report.rows(LOG2_SCALE)
    row = next(r for r in rows if r["file"] == "other/model.safetensors" and r["key"] == "e4m3")
    assert row["dtype"] == "float8_e4m3fn" and row["shape"] == [64] and row["numel"] == 64
    assert not any(r["key"] == "step" for r in rows)  # the int64 step counter of the .npz is left out
    print(f"{len(report.files)} files, {len(rows)} tensors; columns of the TE layouts and of other files as expected")


def test_written_reports(tree, cluster_report, tmp_path):
    report = cluster_report[0]
    j, c = tmp_path / "u.json", tmp_path / "u.csv"
    dumps.write_json(j, report.underflow(LOG2_SCALE))
    dumps.write_csv(c, report.rows(LOG2_SCALE))
    assert json.load(open(j)) == report.underflow(LOG2_SCALE)
    lines = open(c).read().splitlines()
    assert len(lines) == len(report.entries) + 1 and lines[0].startswith("file,key,rank,step,layer,tensor,dtype")
    # Per group: the merged counter's counts, which the group's tensors' counts add up to.
    for row in report.rows(LOG2_SCALE, by="layer,step"):
        members = [r for r in report.rows(LOG2_SCALE) if (r["layer"], r["step"]) == (row["layer"], row["step"])]
        for key in ("numel", "underflows_num", "overflows_num", "zero_num", "nan_num", "mass_nonzero_num",
                    "mass_flushed_num"):
            assert row[key] == sum(r[key] for r in members), (row, key)
        assert row["cur_amax"] == max(r["cur_amax"] for r in members)
    assert sorted(os.listdir(tmp_path)) == ["u.csv", "u.json"]


def test_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        dumps.analyse(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no dump files"):
        dumps.analyse(tmp_path)
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    with pytest.raises(ValueError, match="fp99"):
        dumps.analyse(tmp_path, "fp99")
    with pytest.raises(ValueError, match="epoch"):
        dumps.analyse(tmp_path, by=("epoch",))
    with pytest.raises(ValueError, match="by='layer'"):
        dumps.analyse(tmp_path, by=()).hist(by="layer")
    with pytest.raises(ValueError, match="twice"):
        dumps.analyse(tmp_path, by=("step,step",))
    with pytest.raises(ValueError, match=r"mass lost was measured at log2 scales \[0\] only, not at 3"):
        dumps.analyse(tmp_path, scheduler="sync").underflow(3)
    (tmp_path / "b.npy").write_bytes(b"garbage")
    (tmp_path / "a.npy").unlink()
    r = dumps.analyse(tmp_path, scheduler="sync")
    assert r.skipped == 1 and r.failed[0]["input"] == "b.npy"
    with pytest.raises(ValueError, match="no tensors read from 1 file.*b.npy"):
        r.hist()


def test_command_line(tmp_path, capfd):
    """python -m mpsim.dumps: the report analyse() gives, written whole; exit 1 naming an unreadable file, 2 for bad
    usage with nothing written."""
    import sys

    root = tmp_path / "tree"
    rng = np.random.default_rng(RNG_SEED)
    for rank in (0, 1):
        d = root / "tensor_dumps" / f"rank_{rank}"
        d.mkdir(parents=True)
        for layer in ("fc1", "fc2"):
            torch.save(gradient(rng, (64,), -20, torch.float32), str(d / f"{layer}_wgrad_iter_000005.pt"))
    (root / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    cmd = [sys.executable, "-m", "mpsim.dumps", str(root), "--format", "bf16", "--scale", "1024", "--report", "hist",
           "--by", "layer", "--scheduler", "sync"]
    out_json, out_csv = tmp_path / "r.json", tmp_path / "r.csv"
    r = subprocess.run(cmd + ["--json", str(out_json), "--csv", str(out_csv)], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert "bad.npy" in r.stderr and "skipped" in r.stderr
    want = dumps.analyse(root, "bf16", scheduler="sync", by=("layer",)).hist(10, by="layer")
    assert json.load(open(out_json)) == want
    assert [t["tensor"] for t in want["tensors"]] == ["fc1", "fc2"] and want["skipped_files"] == 1
    lines = open(out_csv).read().splitlines()
    header = lines[0].split(",")
    assert len(lines) == 1 + 2 and header[0] == "layer" and "numel" in header and lines[1].startswith("fc1,")
    assert lines[1].split(",")[header.index("numel")] == "128"  # fc1 of both ranks: 2 x 64 values

    # The failures in this process (dumps.main, what `python -m mpsim.dumps` runs: one process start is enough).
    def run_main(args):
        try:
            status = dumps.main(args)
        except SystemExit as e:  # argparse's usage errors
            status = e.code
        return status

    for bad, message in [(["--scale", "3"], "power of two"), (["--format", "fp99"], "fp99"),
                         (["--by", "epoch"], "epoch"), (["--scheduler", "gpu"], "gpu")]:
        target = tmp_path / "bad.json"
        assert run_main(cmd[3:] + bad + ["--json", str(target)]) == 2, bad
        assert message in capfd.readouterr().err and not target.exists(), bad
    assert run_main([str(tmp_path / "nowhere")]) == 2 and "nowhere" in capfd.readouterr().err
    (root / "tensor_dumps").rename(tmp_path / "elsewhere")
    assert run_main(cmd[3:] + ["--json", str(tmp_path / "none.json")]) == 2
    assert "no tensors read" in capfd.readouterr().err and not (tmp_path / "none.json").exists()
    print("python -m mpsim.dumps: the JSON equal to analyse()'s, the CSV of its 2 layers, exit 1 naming bad.npy, "
          "exit 2 with nothing written for a bad --scale, --format, --by, --scheduler, a missing root and a tree of "
          "no tensor")


def test_unlisted_directory(tmp_path, monkeypatch):
    """A directory that cannot be listed (here: os.scandir refused for it, as for a directory without read
    permission, which root's tests cannot make) is reported with its path; the rest is analysed."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        np.save(tmp_path / d / "x.npy", np.arange(1, 5, dtype=np.float32))
    real_scandir = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith(os.sep + "b"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    r = dumps.analyse(tmp_path, scheduler="sync")
    assert [e.label for e in r.entries] == ["a/x.npy"]
    assert r.failed == [{"input": "b", "error": "b: PermissionError: Permission denied"}] and r.skipped == 1
    assert r.hist()["skipped_files"] == 1
    with pytest.raises(PermissionError):
        dumps.find(tmp_path)
    print("unlisted directory: reported as", r.failed, "and the other directory's file counted")

