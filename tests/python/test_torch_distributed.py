"""GradientMonitor over torch.distributed: two processes on the gloo backend on this machine, each counting
its own shard, merge (step by step, and with all_reduce() at the end) into exactly the counts of one
process fed the concatenated data: every histogram bin, every underflow-counter count, amax and amin.
A DDP model under the monitor merges its ranks' activation gradients the same way."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

import mpsim.torch as mt

FORMATS = ["fp16", "fp8_e4m3"]
WORLD = 2
STEPS = 2


def shard(site, step, rank):
    """The values rank `rank` counts at `site` on `step` (sizes differ by rank; a site only rank 1 has)."""
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + (0 if site == "a" else 1 if site == "b" else 2))
    n = 3000 + 1234 * rank
    x = torch.exp2(torch.empty(n).uniform_(-40, 18, generator=g)) * torch.randn(n, generator=g).sign()
    x[:7] = 0.0
    if rank == 1:
        x[7] = float("inf")
    return x


def sites_of(rank):
    return ["a", "b"] + (["only_rank1"] if rank == 1 else [])


def feed(monitor, ranks):
    for step in range(STEPS):
        for rank in ranks:
            for site in sites_of(rank):
                monitor.observe(site, shard(site, step, rank))
        monitor.step()


def dump_totals(totals, path):
    arrays = {}
    for kind, sites in totals.items():
        for site, counts in sites.items():
            for f, c in counts.counters.items():
                arrays[f"{kind}|{site}|{f}|counts"] = np.asarray(c.counts_array())
                arrays[f"{kind}|{site}|{f}|extremes"] = np.array([c.amax, c.amin_nonzero])
    np.savez(path, **arrays)


def worker(rank, init_file, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    out = Path(out)
    # Step by step (reduce="auto"): every rank's reports are already the merge; rank 0 writes the files.
    auto = mt.GradientMonitor(nn.Linear(1, 1), formats=FORMATS, every=1, hist_every=1, out=out / "auto",
                              weight_grads=False)
    feed(auto, [rank])
    auto.close()
    if rank == 0:
        dump_totals(auto.totals, out / "auto_totals.npz")
    # Nothing exchanged while counting (reduce="never"), one all_reduce() at the end.
    never = mt.GradientMonitor(nn.Linear(1, 1), formats=FORMATS, every=1, reduce="never", weight_grads=False)
    feed(never, [rank])
    merged = never.all_reduce()
    merged_again = never.all_reduce()  # idempotent: merges the local totals again, not the merge
    if rank == 0:
        dump_totals(merged, out / "never_totals.npz")
        dump_totals(merged_again, out / "never_again_totals.npz")
    # Under DistributedDataParallel: each rank's batch; the merged activation-gradient counts hold both.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 2))
    ddp = nn.parallel.DistributedDataParallel(model)
    monitor = mt.GradientMonitor(ddp, formats=["fp16"], every=1)
    local = []

    def count_local(module, inputs, output):
        output.register_hook(lambda g: local.append(g.numel()))

    model[2].register_forward_hook(count_local)
    x = torch.randn(5 + 3 * rank, 6, generator=torch.Generator().manual_seed(rank))
    F.mse_loss(ddp(x), torch.zeros(5 + 3 * rank, 2)).backward()
    report = monitor.step()
    numel = report["formats"]["fp16"]["activation_grad"]["sites"]["module.2/out_grad"]["numel"]
    locals_ = [None] * WORLD
    dist.all_gather_object(locals_, sum(local))
    if rank == 0:
        (out / "ddp.json").write_text(json.dumps({"merged_numel": numel, "local_numels": locals_}))
    monitor.close()
    dist.destroy_process_group()


MASS_SUFFIXES = ("l1_lost", "l2sq_lost", "cosine", "push_down", "lost_bias")


def load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_two_gloo_ranks_merge_to_the_concatenated_data(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)

    # The reference: one process, no torch.distributed, fed both ranks' shards.
    ref = mt.GradientMonitor(nn.Linear(1, 1), formats=FORMATS, every=1, hist_every=1, out=tmp_path / "single",
                             weight_grads=False)
    feed(ref, range(WORLD))
    ref.close()
    dump_totals(ref.totals, tmp_path / "single_totals.npz")
    want = load(tmp_path / "single_totals.npz")
    for name in ("auto", "never", "never_again"):
        got = load(tmp_path / f"{name}_totals.npz")
        assert sorted(got) == sorted(want), name
        counts = sum(int(v.sum()) for k, v in want.items() if k.endswith("counts"))
        bad = [k for k in want if not np.array_equal(got[k], want[k])]
        print(f"{name}: {len(want) // 2} counters (sites x formats) holding {counts} counts, all compared: "
              f"{len(bad)} counters differ from one process fed the concatenated data")
        assert not bad, bad[:3]
    # The files rank 0 wrote equal the single process's: histograms bin for bin, the CSV rows, the report.
    for step in range(1, STEPS + 1):
        name = f"hist/step_{step:06d}.json"
        got = json.loads((tmp_path / "auto" / name).read_text())["activation_grad"]
        ref_hist = json.loads((tmp_path / "single" / name).read_text())["activation_grad"]
        assert got == ref_hist, name
        print(f"{name}: {len(got)} sites, {sum(h['total'] for h in got.values())} values, every bin equal")
    # The gradient mass lost sums doubles: the ranks' sums added in rank order are not the one process's sums of
    # the same values fed in turn (its 4096-blocks' partials go straight into its running sums), so its columns
    # are compared to a relative 1e-12, every other cell exactly.
    got_rows = list(csv.reader(open(tmp_path / "auto" / "steps.csv")))
    want_rows = list(csv.reader(open(tmp_path / "single" / "steps.csv")))
    assert got_rows[0] == want_rows[0] and len(got_rows) == len(want_rows)
    mass_cols = [i for i, c in enumerate(want_rows[0]) if c.split("@")[0].endswith(MASS_SUFFIXES)]
    worst = 0.0
    for g_row, w_row in zip(got_rows[1:], want_rows[1:]):
        assert [c for i, c in enumerate(g_row) if i not in mass_cols] == \
            [c for i, c in enumerate(w_row) if i not in mass_cols]
        for i in mass_cols:
            assert (g_row[i] == "") == (w_row[i] == ""), want_rows[0][i]
            if w_row[i]:
                # push_down and lost_bias are shares of a whole in [-1, 1] whose signed sums may cancel:
                # compared absolutely; the mass sums relatively.
                share = want_rows[0][i].split("@")[0].endswith(("push_down", "lost_bias"))
                err = abs(float(g_row[i]) - float(w_row[i])) / (1 if share else max(abs(float(w_row[i])), 1e-300))
                worst = max(worst, err)
                assert err < 1e-12, (want_rows[0][i], g_row[i], w_row[i])
    print(f"steps.csv: {len(want_rows) - 1} rows, {len(want_rows[0]) - len(mass_cols)} columns equal, "
          f"{len(mass_cols)} mass-lost columns within {worst:.3g} (relative)")
    got = json.loads((tmp_path / "auto" / "underflow.json").read_text())
    want_report = json.loads((tmp_path / "single" / "underflow.json").read_text())
    for f, kinds in want_report["formats"].items():
        for kind, r in kinds.items():
            for g_entry, w_entry in zip(got["formats"][f][kind]["tensors"] + [got["formats"][f][kind]["total"]],
                                        r["tensors"] + [r["total"]]):
                for key in MASS_SUFFIXES:  # in the monitor's mass formats
                    assert (key in g_entry) == (key in w_entry)
                    g_value, w_value = g_entry.pop(key, None), w_entry.pop(key, None)
                    assert (g_value is None) == (w_value is None)
                    if w_value is not None:
                        tol = 1e-12 if key in ("push_down", "lost_bias") else 1e-300
                        assert g_value == pytest.approx(w_value, rel=1e-12, abs=tol), (f, kind, key)
    assert got == want_report
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    print(f"DDP: merged activation gradients at module.2/out_grad {ddp['merged_numel']}, per rank {ddp['local_numels']}")
    assert ddp["merged_numel"] == sum(ddp["local_numels"]) and min(ddp["local_numels"]) > 0
