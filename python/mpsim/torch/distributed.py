"""Merging the monitor's counts over torch.distributed ranks.

Every rank holds, per kind and site, one underflow counter per format (its log2 histogram included): int64
counts in a fixed layout (counts_array()) plus the largest and smallest non-zero magnitudes seen.
One SUM all-reduce of every count concatenated, and one MAX all-reduce of (amax, -amin) pairs, make every
rank hold the counts of the union of all ranks' data: the merged histogram is, bin for bin, the histogram
of the concatenated data. The sites are first made the same on every rank (all_gather_object of the site
names: a rank that never saw a site contributes zeros), so ranks whose models differ still merge.
"""
import numpy as np
import torch

import mpsim


def active(group=None):
    """True when torch.distributed runs with more than one rank in group."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def rank(group=None):
    """This process's rank in group (0 without torch.distributed)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group)
    return 0


def all_reduce_counts(counts, formats, mode, group=None):
    """counts: {kind: {site: SiteCounts}}, merged in place over the ranks of group."""
    import torch.distributed as dist

    from .monitor import SiteCounts

    keys = sorted((kind, site) for kind, sites in counts.items() for site in sites)
    # The gradient mass lost (SiteCounts.mass) travels as its counters' states: its sums are doubles, whose
    # all_reduce SUM would add them in an order the backend picks; gathered, they are added in rank order.
    mass = {f"{kind}\0{site}": {f: m.to_json() for f, m in counts[kind][site].mass.items()}
            for kind, site in keys if counts[kind][site].mass is not None}
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, (keys, mass), group=group)
    union = sorted({tuple(k) for ks, _ in gathered for k in ks})
    for kind, site in union:
        if site not in counts[kind]:
            counts[kind][site] = SiteCounts(formats, mode)

    parts, extremes = [], []
    for kind, site in union:
        for f in formats:
            u = counts[kind][site].counters[f]
            parts.append(np.asarray(u.counts_array(), dtype=np.int64))
            # MAX of -amin is MIN of amin; a counter with no non-zero value (amin 0) must not win it.
            amin = u.amin_nonzero
            extremes += [u.amax, -amin if amin > 0 else -np.inf]
    if not parts:
        return
    sizes = [len(p) for p in parts]
    flat = torch.from_numpy(np.concatenate(parts))
    ext = torch.tensor(extremes, dtype=torch.float64)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    dist.all_reduce(ext, op=dist.ReduceOp.MAX, group=group)

    merged = np.split(flat.numpy(), np.cumsum(sizes)[:-1])
    i = 0
    for kind, site in union:
        counters = {}
        for f in formats:
            amax, neg_amin = float(ext[2 * i]), float(ext[2 * i + 1])
            counters[f] = mpsim.UnderflowCounter.from_counts_array(
                f, mode, merged[i], amax=amax, amin_nonzero=(-neg_amin if neg_amin != -np.inf else 0.0))
            i += 1
        counts[kind][site] = SiteCounts(formats, mode, counters)
        states = [m[f"{kind}\0{site}"] for _, m in gathered if f"{kind}\0{site}" in m]
        if states:
            folded = {f: mpsim.MassLostCounter(f, 0, mode) for f in states[0]}
            for state in states:
                for f in folded:
                    folded[f].merge(mpsim.MassLostCounter.from_json(state[f]))
            counts[kind][site].mass = folded
