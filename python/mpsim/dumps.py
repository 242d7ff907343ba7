"""mpsim.dumps: the reports of `mpsim hist` and `mpsim underflow` over a tree of tensor dumps, as a Dask graph
(docs/dumps.md).

    >>> from mpsim import dumps
    >>> report = dumps.analyse("run42/tensor_dumps", "fp8_e4m3", mass_log2_scales=(10,))   # Dask's local threads
    >>> report.underflow(log2_scale=10)                # the JSON `mpsim underflow --scale 1024 --json` writes
    >>> report.hist(by="layer")                        # one entry per layer, merged over ranks and steps
    >>> report.failed, report.skipped                  # the files that could not be read, and how many

Each file is read and counted by one task (mpsim.UnderflowCounter, the counter of the command line), and the
counters are merged in a tree (dask.bag's reduction). The counts are integers and the moments exact sums
(lib/mpsim/analysis/moments.hpp), so any order of merging gives the same bits: the result equals the command
line's on the same files, whatever the scheduler, the number of workers or the partitioning.

The gradient mass lost (l1_lost, l2sq_lost, cosine: lib/mpsim/analysis/mass_lost.hpp) needs every value rounded at
the loss scale, so it is measured while the files are read, at the scales given as mass_log2_scales, one
mpsim.MassLostCounter per tensor and scale. Its counts are integers but its sums are doubles, whose merge depends
on the order: the groups and the total are not merged in the Dask tree but folded on the client, tensor by tensor
in the order of the files, which is the order `mpsim underflow` adds its tensors' sums in
(tools/mpsim/underflow.cpp, `total_mass += res.mass`), so they equal the command line's bits.
"""
import dataclasses
import functools
import json
import os
import pickle
import re
from typing import Optional

import numpy as np

from . import _core

__all__ = ["DumpFile", "DumpReport", "Entry", "find", "count_file", "grouping", "graph", "analyse", "write_json",
           "write_csv", "main", "COLUMNS", "DEFAULT_TASKS"]

# The suffixes read as dumps: PyTorch's torch.save files, numpy's .npy / .npz, safetensors.
KINDS = {".pt": "pt", ".pth": "pt", ".npy": "npy", ".npz": "npz", ".safetensors": "safetensors"}

# The columns a dump file may have, from its path (find()).
COLUMNS = ("rank", "step", "layer", "tensor")

# Transformer Engine's DumpTensors feature (transformer_engine/debug/features/dump_tensors.py, TensorLogger:
# save_tensor) writes <root>/tensor_dumps/rank_<r>/<layer>_<tensor>_iter_<iteration:06d>.pt, the layer and tensor
# names with '/', '\\', ':', '*', '?', '"', '<', '>', '|', ' ' (and in later versions '.') replaced by '_'. Its
# tensor names are the feature's list (its docstring): activation, gradient, weight, output, wgrad, dgrad. The
# layout rank_<r>/iter_<N>/<layer>_<tensor>.pt (one directory per step) is recognised too.
TE_TENSORS = ("activation", "gradient", "weight", "output", "wgrad", "dgrad")
_TE_FLAT = re.compile(r"(?:^|/)rank_(\d+)/([^/]+)_iter_(\d+)\.pth?$")
_TE_NESTED = re.compile(r"(?:^|/)rank_(\d+)/iter_(\d+)/([^/]+)\.pth?$")


@dataclasses.dataclass(frozen=True)
class DumpFile:
    """One dump file: `path` as the workers open it, `name` its path under the root ('/'-separated, how reports
    name it), `kind` (pt, npy, npz, safetensors) and the columns its path gives (None where the layout has none:
    outside Transformer Engine's layout the tensor is the file's name)."""
    path: str
    name: str
    kind: str
    rank: Optional[int] = None
    step: Optional[int] = None
    layer: Optional[str] = None
    tensor: Optional[str] = None


def _layer_and_tensor(stem):
    """'<layer>_<tensor>' split at a Transformer Engine tensor name when it ends with one, else at its last '_'
    (layer names hold underscores; TE's tensor names do not)."""
    for t in TE_TENSORS:
        if stem.endswith("_" + t) and len(stem) > len(t) + 1:
            return stem[: -len(t) - 1], t
    layer, sep, tensor = stem.rpartition("_")
    return (layer, tensor) if sep and layer else (stem, stem)


def _columns(name):
    if m := _TE_FLAT.search(name):
        layer, tensor = _layer_and_tensor(m.group(2))
        return {"rank": int(m.group(1)), "step": int(m.group(3)), "layer": layer, "tensor": tensor}
    if m := _TE_NESTED.search(name):
        layer, tensor = _layer_and_tensor(m.group(3))
        return {"rank": int(m.group(1)), "step": int(m.group(2)), "layer": layer, "tensor": tensor}
    return {"tensor": name}


def find(root, errors=None):
    """The dump files under root (a directory, walked recursively, or one file), sorted by name: every file
    ending in .pt, .pth, .npy, .npz or .safetensors; other files are not dumps and are left out. A directory
    that cannot be listed is appended to `errors` ({'input': its path under root, 'error': why}) when given, and
    raises OSError otherwise (never passed over in silence)."""
    root = os.fspath(root)
    if os.path.isfile(root):
        kind = KINDS.get(os.path.splitext(root)[1].lower())
        if kind is None:
            raise ValueError(f"{root}: not a dump file (.pt, .pth, .npy, .npz or .safetensors)")
        name = os.path.basename(root)
        return [DumpFile(os.path.abspath(root), name, kind, **_columns(name))]
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: no such file or directory")
    def unlisted(e):
        if errors is None:
            raise e
        name = os.path.relpath(e.filename, root).replace(os.sep, "/") if e.filename else root
        errors.append({"input": name, "error": f"{name}: {type(e).__name__}: {e.strerror or e}"})

    files = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=unlisted):
        dirnames.sort()
        for fn in filenames:
            kind = KINDS.get(os.path.splitext(fn)[1].lower())
            if kind is None:
                continue
            path = os.path.join(dirpath, fn)
            name = os.path.relpath(path, root).replace(os.sep, "/")
            files.append(DumpFile(os.path.abspath(path), name, kind, **_columns(name)))
    files.sort(key=lambda f: f.name)
    return files


# Reading: every tensor of a file as (key, values, dtype name), key "" for a file that is one tensor. The names of
# the dtypes are the command line's (lib/mpsim/io/npy.cpp, to_string(DType)).

def _floating(dtype_name):
    return dtype_name.startswith(("float", "bfloat"))


def _read_npy(path):
    x = np.load(path, mmap_mode="r", allow_pickle=False)
    yield "", x, x.dtype.name


def _read_npz(path):
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            x = z[key]
            yield key, x, x.dtype.name


# safetensors' dtype names (its format's header, "dtype") as numpy dtypes; the 8-bit floats and bfloat16 through
# ml_dtypes, whose names are the command line's dtype names.
_SAFETENSORS_NUMPY = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
                      "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
                      "BOOL": "bool"}
_SAFETENSORS_ML_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                          "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
                          "F8_E8M0": "float8_e8m0fnu"}


def _safetensors_dtype(name, key):
    if name in _SAFETENSORS_NUMPY:
        return np.dtype(_SAFETENSORS_NUMPY[name])
    if name in _SAFETENSORS_ML_DTYPES:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, _SAFETENSORS_ML_DTYPES[name]))
    raise ValueError(f"tensor '{key}' has dtype '{name}', which mpsim.dumps does not read")


def _read_safetensors(path):
    """The tensors of a safetensors file (its format: an 8-byte little-endian header length, a JSON header
    {name: {dtype, shape, data_offsets}}, the data), memory-mapped, in the order of their data as the command line
    reads them."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"truncated safetensors file ({size} bytes)")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise ValueError(f"safetensors header of {n} bytes in a file of {size}")
        header = json.loads(f.read(n))
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    for key, v in entries:
        dtype = _safetensors_dtype(v["dtype"], key)
        begin, end = v["data_offsets"]
        shape = tuple(v["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * dtype.itemsize or 8 + n + end > size:
            raise ValueError(f"tensor '{key}' needs {count * dtype.itemsize} bytes at {begin}..{end} of "
                             f"{size - 8 - n} bytes of data")
        if count == 0:  # np.memmap cannot map zero bytes
            yield key, np.zeros(shape, dtype), dtype.name
        else:
            yield key, np.memmap(path, dtype=dtype, mode="r", offset=8 + n + begin, shape=shape), dtype.name


def _tensors_in(obj, prefix=""):
    """The tensors of what torch.load returned: a tensor, or dicts / lists / tuples of them (keys joined with '.',
    list items by index); other values (numbers, strings) are not tensors and are left out."""
    import torch
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors_in(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors_in(v, f"{prefix}.{i}" if prefix else str(i))


def _read_pt(path):
    import torch
    # weights_only=True: a dump is data; unpickling arbitrary objects from it would run their code. mmap=True reads
    # the storages from the file as they are counted; torch's legacy (pre-zip) format cannot be mapped.
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's message opens with a paragraph on its change of default; the cause follows "WeightsUnpickler
        # error:" (an unknown opcode for a file that is no torch.save output; "Unsupported global" for an object
        # such as Transformer Engine's QuantizedTensor, which only trusted unpickling could build).
        cause = " ".join(str(e).partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0].split())
        cause = cause or str(e).splitlines()[0]
        raise ValueError(f"not readable with torch.load(weights_only=True): {cause}") from None
    for key, t in _tensors_in(obj):
        if t.layout != torch.strided:
            raise ValueError(f"tensor '{key}' has layout {t.layout}; mpsim.dumps reads dense tensors")
        yield key, t, str(t.dtype).removeprefix("torch.")


_READERS = {"pt": _read_pt, "npy": _read_npy, "npz": _read_npz, "safetensors": _read_safetensors}


def _countable(x, dtype_name):
    """x as the counter takes it: float32 / float64 / float16 / bfloat16 as they are (the counter widens the two
    half types exactly), the 8-bit floats widened to float32 here (exactly: float32 holds every value of each)."""
    if dtype_name in ("float32", "float64", "float16", "bfloat16"):
        return x
    return x.float() if hasattr(x, "float") and not isinstance(x, np.ndarray) else np.asarray(x).astype(np.float32)


@dataclasses.dataclass
class Entry:
    """One tensor of one file: `label` as the command line names it ('file' or 'file:key'), `key` its name in the
    file ('' for a file that is one tensor), its dtype's name and the counter of its values."""
    file: DumpFile
    key: str
    label: str
    dtype: str
    counter: "_core.UnderflowCounter"
    mass: dict = dataclasses.field(default_factory=dict)  # {log2_scale: MassLostCounter}


@dataclasses.dataclass
class FileResult:
    file: DumpFile
    entries: list
    error: Optional[str] = None


def count_file(file, fmt="fp16", mode="rne", mass_log2_scales=()):
    """Reads one dump file and counts each of its floating-point tensors into its own UnderflowCounter. A file
    that cannot be read gives no entries and its error, naming it (the rest of a tree goes on). As the command
    line does, a file of several tensors leaves out those that are not floating point (a step counter); a file
    of one such tensor is an error. Each tensor's gradient mass lost is measured at every scale of
    mass_log2_scales (one MassLostCounter each)."""
    try:
        entries, dtypes = [], []
        for key, x, dtype_name in _READERS[file.kind](file.path):
            dtypes.append(dtype_name)
            if not _floating(dtype_name):
                continue
            counter = _core.UnderflowCounter(fmt, mode)
            values = _countable(x, dtype_name)
            counter.add(values)
            mass = {}
            for k in mass_log2_scales:
                mass[k] = _core.MassLostCounter(fmt, k, mode)
                mass[k].add(values)
            entries.append(Entry(file, key, f"{file.name}:{key}" if key else file.name, dtype_name, counter, mass))
        if not entries:
            raise ValueError(f"holds {', '.join(dtypes)} values, not floating point" if dtypes else "holds no tensors")
        return FileResult(file, entries)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 (numpy, zipfile, torch and pickle each raise their own on a bad file)
        first_line = (str(e).strip().splitlines() or [""])[0]
        return FileResult(file, [], f"{file.name}: {type(e).__name__}: {first_line}")


def grouping(spec):
    """A grouping as a tuple of columns: 'layer' -> ('layer',); ('layer', 'step') or 'layer,step' -> both (one group
    per pair of values); () -> the total. ValueError naming a name that is not a column."""
    columns = tuple(c.strip() for c in spec.split(",")) if isinstance(spec, str) else tuple(spec)
    for column in columns:
        if column not in COLUMNS:
            raise ValueError(f"by: {column!r} is not a column; the columns are {', '.join(COLUMNS)}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"by: {spec!r} names a column twice")
    return columns


# The total is the grouping by no column: one group, the empty tuple of values.
TOTAL = ()


def _group_keys(entry, by):
    """The groups an entry belongs to: (columns, values) for the total and each grouping in by."""
    return [(columns, tuple(getattr(entry.file, c) for c in columns)) for columns in (TOTAL, *by)]


def _groups_of(results, by, fmt, mode):
    """The counters of a partition's files merged by group (fresh counters: the entries' own stay as counted)."""
    groups = {}
    for result in results:
        for entry in result.entries:
            for key in _group_keys(entry, by):
                if key not in groups:
                    groups[key] = _core.UnderflowCounter(fmt, mode)
                groups[key].merge(entry.counter)
    return groups


def _merge_groups(parts):
    merged = {}
    for part in parts:
        for key, counter in part.items():
            if key in merged:
                merged[key] = merged[key] + counter
            else:
                merged[key] = counter + _core.UnderflowCounter(counter.format, counter.mode)
    return merged


class DumpReport:
    """What analyse() computed: the files, their entries (one per tensor, with its counter), the files that
    failed, the counters merged per group (by columns) and in total. hist() and underflow() give the reports of
    the command line."""

    def __init__(self, fmt, mode, files, results, groups, by, unlisted=(), mass_log2_scales=()):
        self.format = fmt
        self.mode = mode
        self.mass_log2_scales = tuple(mass_log2_scales)
        self.files = files
        self.entries = [e for r in results for e in r.entries]
        # The directories that could not be listed, then the files that could not be read.
        self.failed = list(unlisted) + [{"input": r.file.name, "error": r.error}
                                        for r in results if r.error is not None]
        self.skipped = len(self.failed)
        self.by = tuple(by)
        self.total = groups.get((TOTAL, ()))
        self.groups = {columns: {v: c for (k, v), c in groups.items() if k == columns} for columns in self.by}

    def _counters(self, by):
        if not self.entries:
            raise ValueError(f"no tensors read from {len(self.files)} file(s)"
                             + (f"; {self.failed[0]['error']}" if self.failed else ""))
        if by is None:
            return {e.label: e.counter for e in self.entries}
        columns = grouping(by)
        if columns not in self.groups:
            raise ValueError(f"by={by!r}: the report was grouped by {', '.join(map(','.join, self.by)) or 'nothing'} "
                             "(analyse(..., by=...))")
        groups = self.groups[columns]
        return {"/".join(map(_group_label, v)): groups[v]
                for v in sorted(groups, key=lambda values: tuple(map(_group_order, values)))}

    def _mass(self, log2_scale, by):
        """{label: MassLostCounter} as _counters(by) names them, and the total: each group's and the total's
        counters folded entry by entry in the order of the files (the command line's order, so its bits)."""
        if log2_scale not in self.mass_log2_scales:
            raise ValueError(f"the gradient mass lost was measured at log2 scales {list(self.mass_log2_scales)} only, "
                             f"not at {log2_scale}: it needs every value rounded at the scale; pass "
                             f"analyse(..., mass_log2_scales=({log2_scale},))")
        def fold(entries):
            out = _core.MassLostCounter(self.format, log2_scale, self.mode)
            for e in entries:
                out.merge(e.mass[log2_scale])
            return out
        total = fold(self.entries)
        if by is None:
            return {e.label: e.mass[log2_scale] for e in self.entries}, total
        columns = grouping(by)
        members = {}
        for e in self.entries:
            members.setdefault(tuple(getattr(e.file, c) for c in columns), []).append(e)
        return {"/".join(map(_group_label, v)): fold(members[v])
                for v in sorted(members, key=lambda values: tuple(map(_group_order, values)))}, total

    def _finish(self, text, by):
        report = json.loads(text)
        if by is None:
            for t, e in zip(report["tensors"], self.entries):
                if "dtype" in t:
                    t["dtype"] = e.dtype  # the stored dtype (an 8-bit float was widened to be counted)
                t["dump"] = {"file": e.file.name, "key": e.key, **{c: getattr(e.file, c) for c in COLUMNS}}
        else:
            report["by"] = ",".join(grouping(by))
        report["failed"] = list(self.failed)
        report["files"] = len(self.files)
        report["skipped_files"] = self.skipped
        return report

    def hist(self, log2_scale=0, by=None):
        """The report `mpsim hist --scale 2^log2_scale --json` writes for the same files, as a dict: one entry per
        tensor (by=None; each with a 'dump' object: file, key, rank, step, layer, tensor) or per value of the
        grouping `by` analyse() computed ('layer', 'step', 'rank', 'tensor', or several as 'layer,step': entries
        named 'value/value'), the total; 'failed' lists the files that could not be read and 'skipped_files' counts
        them."""
        return self._finish(_core.hist_report_json(self._counters(by), log2_scale), by)

    def underflow(self, log2_scale=0, margin=2.0, sweep=False, by=None):
        """The report `mpsim underflow --scale 2^log2_scale [--margin] [--sweep] --json` writes for the same files;
        entries as hist(). The gradient mass lost (l1_lost, l2sq_lost, cosine and their counts) is there as the
        command line writes it; ValueError when analyse() did not measure it at log2_scale (mass_log2_scales)."""
        counters = self._counters(by)
        per_entry, total = self._mass(log2_scale, by)
        report = self._finish(_core.underflow_report_json(counters, log2_scale, margin, sweep), by)
        if by is None:
            for t, e in zip(report["tensors"], self.entries):
                t.update(e.mass[log2_scale].stats())
        else:
            for t in report["tensors"]:
                t.update(per_entry[t["tensor"]].stats())
        report["total"].update(total.stats())
        return report

    def rows(self, log2_scale=0, by=None):
        """One dict per tensor: the columns (file, key, rank, step, layer, tensor), dtype, shape and the counts of
        the underflow report under 2^log2_scale (numel, underflows%, subnormals%, overflows%, cur_amax, ...): a
        table (pandas.DataFrame(report.rows())). With by (a grouping analyse() computed), one dict per group: its
        columns' values and the same counts of the group's merged counter."""
        out = []
        # The mass columns where analyse() measured them at this scale (rows are a table of what was measured).
        mass = self._mass(log2_scale, by)[0] if log2_scale in self.mass_log2_scales and self.entries else None
        if by is not None:
            columns = grouping(by)
            self._counters(columns)  # the checks: tensors read, the grouping computed
            for values, counter in sorted(self.groups[columns].items(),
                                          key=lambda kv: tuple(map(_group_order, kv[0]))):
                row = dict(zip(columns, values))
                row.update(counter.underflow(log2_scale))
                if mass is not None:
                    row.update(mass["/".join(map(_group_label, values))].stats())
                out.append(row)
            return out
        for e in self.entries:
            row = {"file": e.file.name, "key": e.key, **{c: getattr(e.file, c) for c in COLUMNS},
                   "dtype": e.dtype, "shape": e.counter.shape}
            row.update(e.counter.underflow(log2_scale))
            if mass is not None:
                row.update(e.mass[log2_scale].stats())
            out.append(row)
        return out


def _group_label(value):
    return "(none)" if value is None else str(value)


def _group_order(value):
    # Steps and ranks in numeric order, names in text order, files outside the layout (None) last.
    return (value is None, isinstance(value, str), value if value is not None else 0)


# Tasks a tree is split into by default: Dask's per-task overhead (measured 2 ms a task here, under load:
# docs/performance.md) stays small beside the reading, and a cluster of up to a few dozen workers has several
# tasks each.
DEFAULT_TASKS = 128


def graph(files, fmt="fp16", mode="rne", *, by=("layer", "step"), files_per_task=None, split_every=8,
          mass_log2_scales=(0,)):
    """The Dask graph of analyse() over a list of DumpFile: (the per-file results, the merged groups) as two
    dask.bag objects (a Bag and an Item) sharing their reading tasks."""
    import dask.bag as db

    if files_per_task is None:
        files_per_task = -(-len(files) // DEFAULT_TASKS)
    bag = db.from_sequence(files, partition_size=max(1, int(files_per_task)))
    counted = bag.map(count_file, fmt, mode, tuple(mass_log2_scales))
    by = tuple(grouping(g) for g in by)
    groups = counted.reduction(functools.partial(_groups_of, by=by, fmt=fmt, mode=mode), _merge_groups,
                               split_every=split_every)
    return counted, groups


def analyse(root, fmt="fp16", mode="rne", *, client=None, scheduler="threads", by=("layer", "step"),
            files_per_task=None, split_every=8, mass_log2_scales=(0,)):
    """Counts every tensor of every dump file under root (find()) for fmt and mode, as `mpsim hist` / `mpsim
    underflow` do, as a Dask graph: one task reads and counts `files_per_task` files (default: the files split into
    DEFAULT_TASKS tasks, one file per task for a tree of fewer files), a tree of `split_every`-way
    merges sums the counters of each group and the total. mass_log2_scales: the loss scales (log2) at which the
    gradient mass lost is measured, each a rounding of every value (underflow() reports it at those). by: groupings, each a column among 'layer', 'step',
    'rank', 'tensor' or several together (('layer', 'step'), or 'layer,step': a group per pair of values).

    client: a dask.distributed Client to run on (its workers must import mpsim and see root at the same path);
    without one, Dask's local `scheduler` ('threads', 'processes' or 'sync'). Returns a DumpReport; a file that
    cannot be read is named in its `failed` list and the others are counted.
    """
    _core.UnderflowCounter(fmt, mode)  # a bad format or mode is the caller's error, not every file's
    mass_log2_scales = tuple(dict.fromkeys(int(k) for k in mass_log2_scales))
    by = tuple(grouping(g) for g in by)
    if (files_per_task is not None and int(files_per_task) < 1) or int(split_every) < 2:
        raise ValueError("files_per_task must be at least 1 and split_every at least 2")
    unlisted = []
    files = find(root, unlisted)
    if not files and not unlisted:
        raise ValueError(f"{os.fspath(root)}: no dump files (.pt, .pth, .npy, .npz, .safetensors)")
    if not files:  # every directory below root unlisted: a report of failures only
        return DumpReport(fmt, mode, files, [], {}, by, unlisted, mass_log2_scales)
    counted, groups = graph(files, fmt, mode, by=by, files_per_task=files_per_task, split_every=split_every,
                            mass_log2_scales=mass_log2_scales)
    if client is not None:
        results, merged = client.compute([counted, groups], sync=True)
    else:
        import dask

        results, merged = dask.compute(counted, groups, scheduler=scheduler)
    return DumpReport(fmt, mode, files, results, merged, by, unlisted, mass_log2_scales)


def write_json(path, report):
    """Writes a report (a dict from hist() / underflow()) as JSON, whole or not at all (a temporary file
    renamed)."""
    _write_atomic(path, json.dumps(report, indent=2) + "\n")


def write_csv(path, rows):
    """Writes rows() as CSV (a header of the union of their keys, in first-seen order), whole or not at all."""
    import csv
    import io

    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    _write_atomic(path, buf.getvalue())


def _write_atomic(path, text):
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _log2_scale(text):
    """log2 of a power-of-two --scale (the command line's rule, tools/mpsim/analysis_common.hpp log2_scale)."""
    import argparse
    import math

    try:
        s = float(text)
    except ValueError:
        s = math.nan
    m, e = math.frexp(s) if math.isfinite(s) else (0.0, 0)
    if not (s > 0 and math.isfinite(s) and m == 0.5):
        raise argparse.ArgumentTypeError(f"--scale {text}: must be a positive power of two")
    return e - 1


def _grouping_arg(text):
    import argparse

    try:
        return grouping(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv=None):
    """python -m mpsim.dumps ROOT ...: the report of `mpsim hist` / `mpsim underflow` over a dump tree (docs/dumps.md).
    Exit status 0; 1 when some files could not be read (named on stderr, the others reported); 2 for bad usage or
    when no tensor could be read (nothing written)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m mpsim.dumps", description="The reports of `mpsim hist` and `mpsim "
                                "underflow` over a tree of dumps (.pt, .npy, .npz, .safetensors), on Dask.")
    p.add_argument("root", help="a directory of dumps (walked recursively) or one dump file")
    p.add_argument("--report", choices=["underflow", "hist"], default="underflow")
    p.add_argument("--format", default="fp16", help="the format counted against (as mpsim's --format)")
    p.add_argument("--mode", default="rne", help="its rounding mode: rne, rtz, ru, rd, rna, rto")
    p.add_argument("--scale", type=_log2_scale, default=0, metavar="S", help="loss scale, a power of two")
    p.add_argument("--margin", type=float, default=2.0, help="underflow: the recommended scale's headroom")
    p.add_argument("--sweep", action="store_true", help="underflow: every scale 2^-8 .. 2^32")
    p.add_argument("--by", type=_grouping_arg, metavar="COLUMNS",
                   help="one entry per value of a column (rank, step, layer, tensor) or of several (layer,step) "
                        "instead of one per tensor")
    p.add_argument("--json", help="write the report as JSON (-: standard output)")
    p.add_argument("--csv", help="write one row per tensor (or per group with --by): columns and counts, as CSV")
    p.add_argument("--scheduler", default="threads",
                   help="threads, processes, sync, or a dask.distributed scheduler address (tcp://host:8786)")
    p.add_argument("--files-per-task", type=int, default=None)
    a = p.parse_args(argv)

    client = None
    try:
        if "://" in a.scheduler:
            import distributed
            client = distributed.Client(a.scheduler)
        elif a.scheduler not in ("threads", "processes", "sync"):
            p.error(f"--scheduler {a.scheduler}: not threads, processes, sync or an address such as tcp://host:8786")
        report = analyse(a.root, a.format, a.mode, client=client, scheduler=a.scheduler,
                         by=(a.by,) if a.by is not None else (), files_per_task=a.files_per_task,
                         mass_log2_scales=(a.scale,))
        if a.report == "hist":
            out = report.hist(a.scale, by=a.by)
        else:
            out = report.underflow(a.scale, a.margin, a.sweep, by=a.by)
    except (ValueError, OSError) as e:
        print(f"python -m mpsim.dumps: error: {e}", file=sys.stderr)
        return 2
    finally:
        if client is not None:
            client.close()
    if a.json == "-":
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    elif a.json:
        write_json(a.json, out)
    if a.csv:
        write_csv(a.csv, report.rows(a.scale, by=a.by))
    for f in report.failed:
        print(f"python -m mpsim.dumps: error: {f['error']} (skipped; the other files are reported)", file=sys.stderr)
    if a.json != "-":
        t = out["total"]
        print(f"{len(report.entries)} tensors in {len(report.files) - report.skipped} of {len(report.files)} files, "
              f"{t['numel']} values; {report.format} under 2^{a.scale}: underflows {t['underflows%']:.4g}%, "
              f"overflows {t['overflows%']:.4g}%")
    return 1 if report.failed else 0


if __name__ == "__main__":
    # Run as `python -m mpsim.dumps`: the graph's functions must be those of the module mpsim.dumps (which Dask's
    # worker processes import by name), not of this __main__.
    from mpsim.dumps import main as _main

    raise SystemExit(_main())
