"""GradientMonitor: what fp16, bf16 and fp8 would do to a PyTorch model's gradients, measured during training.

    monitor = mpsim.torch.GradientMonitor(model, every=10, scaler=scaler, out="runs/torch1")
    for batch in data:
        loss = loss_fn(model(batch.x), batch.y)
        scaler.scale(loss).backward()
        monitor.step(loss)              # once per optimiser step, after backward (before or after scaler.step)
        scaler.step(opt); scaler.update(); opt.zero_grad()
    monitor.close()                     # writes steps.csv, run.json, underflow.json; removes the hooks

On every `every`-th step (the first included) it counts, per layer:
  * activation gradients: the gradient arriving at each module's output (a tensor hook on the output,
    registered by a forward hook only on sampled steps, so the other steps pay for one Python call per
    module; a full backward hook would wrap every forward in autograd nodes on every step). Given the
    emulation hooks (emulation=, emulate.py), the gradients at their activation-gradient rounding sites
    instead (MODULE/out_grad and MODULE/in_grad; an LSTM's gates_grad, h_grad, in_grad), before they are
    rounded;
  * weight gradients: each parameter's .grad when backward has accumulated it (post-accumulate-grad
    hooks; with gradient accumulation the last backward's .grad; under DDP this rank's own gradient, as
    the hooks run before DDP averages it);
  * optionally activations (the module outputs).
Values are counted as backward produces them, so under a GradScaler they include the loss scale S, read
from the scaler during backward: the shares below are "at the current loss scale", and scale windows and
recommendations are given as absolute log2 loss scales (relative shifts + log2 S).
For each format it reports the share of non-zero finite values that would underflow to zero, become
subnormal or overflow (mpsim.UnderflowCounter: every power-of-two scale from one pass), the scale window
with no overflow and the fewest underflows, and the recommended scale (largest 2^k with amax*2^k*margin <=
max finite); log2 histograms (mpsim.Histogram) per site. For activation and weight gradients also
the gradient mass lost at the current loss scale (mpsim.MassLostCounter: l1_lost, l2sq_lost, cosine), per
site and in total, in the first format (mass=True: every format; mass=[F, ...]: those); the weight gradients'
total is that of the whole step's update direction.

Under a scaling recipe (emulation=emulate(model, recipe=...)) it also counts, per LAYER/ROLE, what the recipe
did to each GEMM operand in its own formats (Recipe.quantize's counts: flushed, subnormal, saturated after the
scale) and the mass lost between the operand and the values the GEMM multiplied (RecipeCounts): step()'s
"recipe", steps.csv's SITE:KEY@recipe and recipe:* columns, underflow.json's "recipe".

Files under `out` (rank 0 only), in the schemas `mpsim train` writes, so the notebooks draw a PyTorch run
with the simulator's drawing code; written on every `hist_every`-th sampled step (default 10: with
every=10, steps 1, 101, 201, ...), by flush() and by close():
  steps.csv               one row per sampled step: step,loss,metric,scale,skipped,grad_norm,swallowed, then
                          SITE:zero,SITE:subnormal,SITE:overflow per activation-gradient site in the first
                          format (fractions of the non-zero finite values), SITE:zero@F ... for the other
                          formats, and per format F the totals F:underflow, F:subnormal, F:overflow,
                          F:recommended_log2_scale, F:window_lo, F:window_hi (activation gradients) and
                          F:w_underflow, F:w_subnormal, F:w_overflow (weight gradients); in the mass formats
                          SITE:l1_lost, SITE:l2sq_lost, SITE:cosine (@F for the other formats), F:l1_lost,
                          F:l2sq_lost, F:cosine and F:w_l1_lost, F:w_l2sq_lost, F:w_cosine
  hist/step_NNNNNN.json   schema mpsim-train-hist-1: activation_grad / weight_grad (and activation) per site
  run.json                schema mpsim-train-run-1 (configuration, sites, histogram steps)
  underflow.json          per format and kind, the `mpsim underflow` report of every site over every
                          sampled step
Under torch.distributed every rank counts its own data. With reduce="auto" (the default) each sampled
step's counts are merged over the ranks (every rank must call step() on the same steps, as DDP does), so
every rank's reports and totals are those of all ranks and rank 0 writes them; with reduce="never" nothing
is exchanged during training and all_reduce() merges the run totals once, at the end.
"""
import csv
import io
import json
import math
import os
import weakref
from collections.abc import Mapping
from pathlib import Path

import torch

import mpsim

from . import _device_counts
from . import distributed as _dist
from ._tensors import values_to_count

DEFAULT_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
KINDS = ("activation_grad", "weight_grad", "activation")
# The gradient mass lost's columns (lib/mpsim/analysis/mass_lost.hpp; `mpsim underflow` writes the same names).
MASS_COLUMNS = ("l1_lost", "l2sq_lost", "cosine")
# The scale windows are searched over loss scales 2^-128 .. 2^128: beyond them the scale itself is not a
# finite float32 (what GradScaler keeps it in).
SWEEP_LOG2 = 128
# Recipe.quantize's integer stats (the bulk engine's Stats, lib/mpsim/format/bulk.hpp; for MX and nvfp4 made
# from BlockStats), summed per LAYER/ROLE under emulate(recipe=...).
RECIPE_COUNT_KEYS = ("count", "zero_in", "nan", "inf_in", "exact", "rounded", "underflow", "subnormal", "overflow_num")
# The gradient operands of a layer's GEMMs (docs/recipes.md): the recipe's dy, the totals' "dy_" columns.
RECIPE_GRAD_ROLES = ("dgrad_dy", "wgrad_dy")


def _mass_merge(a, b):
    """The sum of two MassLost states (the JSON text mpsim._core.mass_lost_add returns; None: empty), field by
    field as MassLost::operator+= adds them (lib/mpsim/analysis/mass_lost.cpp lines 55-66): integers exactly,
    the sums as IEEE doubles, which Python's floats are, and the JSON text carries them exactly both ways."""
    if a is None or b is None:
        return a if b is None else b
    x, y = json.loads(a), json.loads(b)
    return json.dumps({k: x[k] + y[k] for k in x})


class RecipeCounts:
    """What a scaling recipe did to one GEMM operand (LAYER/ROLE) over the quantizations counted, in the recipe's
    own formats: the sums of Recipe.quantize's integer stats (each element after its scale, rounded to the
    element format: e4m3 / e5m2, the MX element, nvfp4's e2m1), so `underflow` is what the recipe flushed to
    zero; and the gradient mass lost between the operand and the values the GEMM multiplied (the state of
    mpsim._core.mass_lost_add, as Emulation.mass_lost() measures it; None while nothing was quantized element
    by element: nvfp4's Hadamard-transformed wgrad operands, fp8-rowwise-gw-hp's unquantized wgrad)."""

    def __init__(self):
        self.counts = dict.fromkeys(RECIPE_COUNT_KEYS, 0)
        self.mass = None

    def add(self, operand, got):
        """operand: the float32 tensor quantized; got: Recipe.quantize's dict for it."""
        st = got["stats"]
        for k in RECIPE_COUNT_KEYS:
            self.counts[k] += st.get(k, 0)
        if got["quantized"] and not got["hadamard"]:
            self.mass = mpsim._core.mass_lost_add(self.mass, operand.numpy(), got["values"])

    def merge(self, other):
        for k in RECIPE_COUNT_KEYS:
            self.counts[k] += other.counts[k]
        self.mass = _mass_merge(self.mass, other.mass)
        return self

    def stats(self):
        """The counts under the monitor's names (nonzero_finite_num, underflows_num, subnormals_num,
        overflows_num), the shares zero / subnormal / overflow of the non-zero finite values, and the mass lost's
        l1_lost, l2sq_lost, cosine, mass_nonzero_num, mass_flushed_num when measured."""
        c = self.counts
        nonzero = c["exact"] + c["rounded"]
        st = {"count": c["count"], "nonzero_finite_num": nonzero, "underflows_num": c["underflow"],
              "subnormals_num": c["subnormal"], "overflows_num": c["overflow_num"]}
        for key, num in (("zero", "underflow"), ("subnormal", "subnormal"), ("overflow", "overflow_num")):
            st[key] = c[num] / nonzero if nonzero else 0.0
        if self.mass is not None:
            st.update(mpsim._core.mass_lost_report(self.mass))
        return st


def _recipe_summary(spec, counts):
    """{"spec", "sites": {LAYER/ROLE: stats}, "total": stats, "dy_total": stats}: per operand, over every operand
    and over the gradient operands (dgrad_dy, wgrad_dy), the sums taken in sorted site order (fixed bits)."""
    total, dy = RecipeCounts(), RecipeCounts()
    for site in sorted(counts):
        total.merge(counts[site])
        if site.rpartition("/")[2] in RECIPE_GRAD_ROLES:
            dy.merge(counts[site])
    return {"spec": spec, "sites": {site: counts[site].stats() for site in sorted(counts)},
            "total": total.stats(), "dy_total": dy.stats()}


class SiteCounts:
    """Everything counted at one site: one underflow counter per format (each also holds the site's log2
    histogram, so no histogram pass is added), all filled by one pass over the values
    (mpsim.UnderflowCounter.add_many); for each format of `mass` also the gradient mass lost
    (mpsim.MassLostCounter at the values as counted: a rounding of every value per format)."""

    def __init__(self, formats, mode, counters=None, empty=None, mass=()):
        if counters is None:
            # Copies of empty counters (the sum of an empty counter with itself) are about ten times quicker to
            # make than new ones, which first find the format's rounding thresholds.
            counters = ({f: empty[f] + empty[f] for f in formats} if empty is not None
                        else {f: mpsim.UnderflowCounter(f, mode, moments=False) for f in formats})
        self._counters = counters
        self._all = list(counters.values())
        self._pending = None  # tensors counted on their device, added to the counters when they are read
        self.mass = {f: mpsim.MassLostCounter(f, 0, mode) for f in mass} if mass else None

    @property
    def counters(self):
        """{format: mpsim.UnderflowCounter}, everything added so far included."""
        if self._pending is not None:
            self._pending.flush()
        return self._counters

    @property
    def hist(self):
        """The log2 histogram of the values seen (mpsim.Histogram)."""
        return next(iter(self.counters.values())).histogram()

    def add(self, values):
        """values: a numpy array (counted in C++) or a tensor (counted by torch operations on its device, summed
        there until the counters are read: one transfer per site and step)."""
        if isinstance(values, torch.Tensor):
            if self._pending is None:
                self._pending = _device_counts.Pending(self._all)
            self._pending.add(values)
        else:
            mpsim.UnderflowCounter.add_many(self._all, values)
        if self.mass is not None:
            # The rounding runs in C++ on host memory: a tensor on another device is copied over once for all
            # the formats (the one cost here a step on an accelerator pays per site).
            host = values if not isinstance(values, torch.Tensor) else values.detach().cpu().contiguous().numpy()
            for m in self.mass.values():
                m.add(host)

    def clear(self):
        """Forgets every value counted (the counters as new ones: UnderflowCounter.clear, MassLostCounter.clear),
        so that the next sampled step reuses them instead of copying four empty counters again."""
        for c in self.counters.values():
            c.clear()
        self._pending = None
        for m in (self.mass or {}).values():
            m.clear()

    def merge(self, other):
        for f, c in self.counters.items():
            c.merge(other.counters[f])
        if self.mass is not None and other.mass is not None:
            for f, m in self.mass.items():
                m.merge(other.mass[f])


def _atomic_write(path, text):
    """Writes text to path through a temporary file and a rename: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _number(x):
    """A CSV cell: empty for a missing value, integers as integers, other numbers as the shortest text
    that reads back exactly (repr)."""
    if type(x) is float:  # most cells of a row: taken before the checks below (a row has ~100 cells)
        return repr(x)
    if x is None:
        return ""
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def _norms_read(norms):
    """The values of 0-d tensors as Python floats, in their order: one transfer when they share a device (a
    model split over devices reads each)."""
    norms = list(norms)
    if len({n.device for n in norms}) > 1:
        return [float(n) for n in norms]
    return torch.stack(norms).tolist() if norms else []


def _site_observer(ref):
    """(site, gradient) -> counted as an activation gradient by the monitor behind ref, if it still lives."""
    def observe(site, grad):
        mon = ref()
        if mon is not None:
            mon.observe(site, grad, kind="activation_grad")
    observe.monitor = ref
    return observe


def _recipe_observer(ref):
    """(LAYER/ROLE, operand, Recipe.quantize's dict) -> counted by the monitor behind ref on its sampled steps;
    an evaluation forward under no_grad (record False) is not a training step's and is left out."""
    def observe(site, operand, got):
        mon = ref()
        if mon is not None and mon._sampling and got.get("record", True):
            counts = mon._recipe_counts.get(site)
            if counts is None:
                counts = mon._recipe_counts[site] = RecipeCounts()
            counts.add(operand, got)
    observe.monitor = ref
    return observe


def _grad_hook(ref, site):
    observe = _site_observer(ref)
    return lambda grad: observe(site, grad)


class _OutputHook:
    """A monitor's forward hook on a module: counts its outputs and hooks their gradients. An object, not a
    closure, so that the model it is on still deepcopies, pickles and torch.saves; a copy has no monitor (a
    weak reference does not pickle, and the monitor is not part of the model) and does nothing, as the hook
    of a monitor that was dropped."""

    def __init__(self, ref, site, grads, activations):
        self.ref, self.site, self.grads, self.activations = ref, site, grads, activations

    def __getstate__(self):
        return dict(self.__dict__, ref=None)

    def __call__(self, module, inputs, output):
        mon = self.ref() if self.ref is not None else None
        if mon is None or not mon._sampling or not torch.is_grad_enabled():
            return None
        for suffix, t in _output_tensors(output):
            if self.activations and t.is_floating_point():
                mon.observe(f"{self.site}/out{suffix}", t, kind="activation")
            if self.grads and t.requires_grad:
                t.register_hook(_grad_hook(self.ref, f"{self.site}/out{suffix}_grad"))
        return None


def _output_tensors(out, name=""):
    """(suffix, tensor) for every tensor in a module's output: "" for a lone tensor, "." and the index or key
    path for tuples, lists and dicts (an LSTM's (output, (h, c)) gives .0, .1.0, .1.1)."""
    if isinstance(out, torch.Tensor):
        return [(name, out)]
    if isinstance(out, (tuple, list)):
        items = enumerate(out)
    elif isinstance(out, Mapping):
        items = out.items()
    else:
        return []
    return [t for k, o in items for t in _output_tensors(o, f"{name}.{k}")]


class GradientMonitor:
    """Per-layer gradient telemetry in low-precision formats; see the module docstring."""

    def __init__(self, model, formats=DEFAULT_FORMATS, *, every=10, scaler=None, out=None, activations=False,
                 activation_grads=True, weight_grads=True, modules=None, hist_every=10, mode="rne", margin=2.0,
                 policy=None, reduce="auto", group=None, emulation=None, counting="auto", mass=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"GradientMonitor: expected a torch.nn.Module, got {type(model).__name__}")
        if isinstance(formats, str):
            formats = (formats,)
        if not formats:
            raise ValueError("GradientMonitor: formats is empty")
        self.formats = tuple(mpsim.Format(f).name for f in formats)  # unknown names fail here, named
        # Without the exact moments: they cost about five times the range counts per value (docs/performance.md),
        # and the monitor reports shares and windows, not moments.
        self._empty = {f: mpsim.UnderflowCounter(f, mode, moments=False) for f in self.formats}
        if int(every) < 1 or int(hist_every) < 0:
            raise ValueError(f"GradientMonitor: every={every} must be >= 1 and hist_every={hist_every} >= 0")
        if reduce not in ("auto", "never"):
            raise ValueError(f"GradientMonitor: reduce={reduce!r} is not 'auto' or 'never'")
        if counting not in ("auto", "torch"):
            raise ValueError(f"GradientMonitor: counting={counting!r} is not 'auto' or 'torch'")
        # "auto": CPU tensors in C++ (the quickest there), others by torch operations on their device
        # (_device_counts.py); "torch": every tensor by torch operations (the device path, on any device).
        self.counting = counting
        # The gradient mass lost (mpsim.MassLostCounter) of the activation and weight gradients, in the formats
        # `mass` names: None (the default) the first format only, True every format, False none. Each format
        # is a rounding of every value: scripts/bench_torch_monitor.py measured all four formats at 4-6 times
        # the counting's cost per sampled step (docs/torch.md, Cost).
        if mass is None:
            self.mass_formats = self.formats[:1]
        elif mass is True or mass is False:
            self.mass_formats = self.formats if mass else ()
        else:
            self.mass_formats = tuple(mpsim.Format(f).name for f in ((mass,) if isinstance(mass, str) else mass))
            unknown = [f for f in self.mass_formats if f not in self.formats]
            if unknown:
                raise ValueError(f"GradientMonitor: mass={mass!r} names {', '.join(unknown)}, not among formats "
                                 f"{', '.join(self.formats)}")
        self.model = model
        self.every = int(every)
        self.hist_every = int(hist_every)
        self.scaler = scaler
        self.out = Path(out) if out is not None else None
        self.mode = mode
        self.margin = float(margin)
        recipe = emulation.recipe if emulation is not None else None
        # The scaling recipe's spec under emulate(recipe=...): its quantized operands are counted per LAYER/ROLE.
        self.recipe = recipe.spec if recipe is not None else None
        self.policy = policy or (f"pytorch, emulated (mpsim.torch.emulate, recipe {self.recipe})" if recipe is not None
                                 else "pytorch, emulated (mpsim.torch.emulate)" if emulation else "pytorch")
        self.reduce = reduce
        self.group = group
        self.step_number = 1
        self.last = None
        self.totals = {k: {} for k in KINDS}  # every sampled step so far (this rank's with reduce="never")
        self.merged_totals = None  # all_reduce()'s merge of every rank's totals
        self._counts = {k: {} for k in KINDS}
        self._spare = {}  # (kind, site) -> a cleared SiteCounts for the next sampled step
        self._scale = None
        self._grad_norms = {}
        self._sampling = True
        self._hist_steps = []
        self._rows = []
        self._columns = None
        self._csv_columns, self._csv_rows = None, 0  # what steps.csv holds
        self._handles = []
        self._observed_sites = []  # emulation sites this monitor observes
        self._ref = weakref.ref(self)
        self._activation_sites = []  # as seen, sorted (a module with several outputs: SITE/out.I_grad)
        self._recipe_counts = {}     # LAYER/ROLE -> RecipeCounts of this step (under a recipe)
        self.recipe_totals = {}      # LAYER/ROLE -> RecipeCounts of every sampled step so far
        self._recipe_sites = []      # as seen, sorted
        self._recipe_emulation = None

        if modules is None:  # leaf modules with parameters of their own: the layers
            modules = [(n, m) for n, m in model.named_modules()
                       if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]
        else:
            names = {id(m): n for n, m in model.named_modules()}
            missing = [type(m).__name__ for m in modules if id(m) not in names]
            if missing:
                raise ValueError(f"GradientMonitor: modules {missing} are not part of {type(model).__name__}")
            modules = [(names[id(m)], m) for m in modules]
        emulated = set()
        if emulation is not None:
            # The gradients at the emulation's activation-gradient sites, before they are rounded
            # (MODULE/out_grad: what arrives at the output; MODULE/in_grad: the input's gradient the GEMM
            # computed; an LSTM's gates_grad and h_grad), as the simulator counts its sites; the output hooks
            # below would see the out_grad values once more.
            emulated = {id(m) for m in emulation.modules}
            ref = self._ref
            if recipe is not None:
                # The recipe's operands as it quantized them, on sampled steps (RecipeCounts): counted in C++ by
                # the quantization itself, so a sampled step adds only the mass lost's pass over each operand.
                emulation.quantize_observers.append(_recipe_observer(ref))
                self._recipe_emulation = emulation
            for site in emulation.sites.values():
                if activation_grads and site.kind == "activation_grad":
                    site.observers.append(_site_observer(ref))
                    self._observed_sites.append(site)
        if activation_grads or activations:
            for name, m in modules:
                site = name or type(m).__name__
                grads_here = activation_grads and id(m) not in emulated
                if not (grads_here or activations):
                    continue
                self._handles.append(m.register_forward_hook(
                    self._forward_hook(site, grads_here, activations)))
        if weight_grads:
            for pname, p in model.named_parameters():
                if p.requires_grad:
                    mod, _, leaf = pname.rpartition(".")
                    site = f"{mod}/{leaf}_grad" if mod else f"{leaf}_grad"
                    self._handles.append(p.register_post_accumulate_grad_hook(self._weight_hook(site)))

    # ---- hooks -------------------------------------------------------------------------------------
    # The hooks the model holds reach the monitor through a weak reference: the model does not keep a
    # monitor (and its counters) alive, and a monitor that is dropped leaves hooks that do nothing.
    def _forward_hook(self, site, grads, activations):
        return _OutputHook(weakref.ref(self), site, grads, activations)

    def _weight_hook(self, site):
        ref = weakref.ref(self)

        def hook(param):
            mon = ref()
            if mon is not None and mon._sampling and param.grad is not None:
                # With gradient accumulation the hook fires once per backward: the latest accumulated .grad
                # replaces what an earlier micro-batch's backward counted.
                mon._counts["weight_grad"].pop(site, None)
                mon.observe(site, param.grad, kind="weight_grad")
                # Kept as a tensor on the gradient's device: read once per step (_norms_read), not once per
                # parameter (a GPU synchronisation each).
                mon._grad_norms[site] = torch.linalg.vector_norm(param.grad.detach())
        return hook

    # ---- counting ----------------------------------------------------------------------------------
    def current_scale(self):
        """The loss scale backward runs under: the GradScaler's when one is given and enabled, else 1."""
        s = self.scaler
        if s is None or not getattr(s, "is_enabled", lambda: True)():
            return 1.0
        return float(s.get_scale())

    def observe(self, site, tensor, kind="activation_grad"):
        """Counts tensor's values at `site` for this step (what the hooks call; also for tensors of your
        own). Counts only on sampled steps; float tensors on any device (fp16 / bf16 are widened exactly)."""
        if kind not in KINDS:
            raise ValueError(f"observe: kind {kind!r} is not one of {', '.join(KINDS)}")
        if not self._sampling:
            return
        if self._scale is None:
            self._scale = self.current_scale()
        values = values_to_count(tensor, f"{kind} {site}", on_device=self.counting == "torch")
        counts = self._counts[kind].get(site)
        if counts is None:
            # The site's counters of an earlier sampled step, cleared by step(), else new ones.
            counts = self._spare.pop((kind, site), None)
            if counts is None:
                counts = SiteCounts(self.formats, self.mode, empty=self._empty,
                                    mass=self.mass_formats if kind != "activation" else ())
            self._counts[kind][site] = counts
        counts.add(values)

    @property
    def sampling(self):
        """True when the step in progress is counted."""
        return self._sampling

    def step(self, loss=None):
        """Ends one optimiser step. On a sampled step: merges the ranks' counts (under torch.distributed),
        adds them to the totals, keeps the step's steps.csv row, writes the files on histogram steps and
        returns this step's report (a dict: summarize()'s, with step, loss and grad_norm); on other steps
        returns None."""
        result = None
        if self._sampling:
            if self.reduce == "auto" and _dist.active(self.group):
                _dist.all_reduce_counts(self._counts, self.formats, self.mode, self.group)
            scale = self._scale if self._scale is not None else self.current_scale()
            if isinstance(loss, torch.Tensor):
                loss = float(loss.detach())
            result = self.summarize(self._counts, scale, detail_kinds=("activation_grad", "activation"))
            result.update(step=self.step_number, loss=loss)
            # The unscaled global norm, as torch.nn.utils.clip_grad_norm_ after scaler.unscale_ (this rank's).
            norms = _norms_read(self._grad_norms.values())
            result["grad_norm"] = math.sqrt(sum(n * n for n in norms)) / scale if norms else None
            reusable = []
            for kind, sites in self._counts.items():
                for site, counts in sites.items():
                    total = self.totals[kind].get(site)
                    if total is not None:
                        total.merge(counts)
                        reusable.append((kind, site, counts))
                    else:
                        self.totals[kind][site] = counts
            if self.reduce == "never":
                self.merged_totals = None  # stale: all_reduce() again for the merge of every rank
            if self.recipe is not None:
                # This rank's: the recipe counts are not merged over ranks (docs/torch.md#recipes).
                result["recipe"] = _recipe_summary(self.recipe, self._recipe_counts)
                for site, counts in self._recipe_counts.items():
                    if site in self.recipe_totals:
                        self.recipe_totals[site].merge(counts)
                    else:
                        self.recipe_totals[site] = counts
            self.last = result
            if self.out is not None and _dist.rank(self.group) == 0:
                self._write_step(result)  # a histogram step's file is this step's counts: before they are cleared
            # Nothing holds this step's merged counters now: cleared, the site's next sampled step counts into
            # them (a new SiteCounts copies four empty counters, ~15 us).
            for kind, site, counts in reusable:
                counts.clear()
                self._spare[kind, site] = counts
        self._counts = {k: {} for k in KINDS}
        self._recipe_counts = {}
        self._scale = None
        self._grad_norms = {}
        self.step_number += 1
        self._sampling = (self.step_number - 1) % self.every == 0
        return result

    # ---- reports -----------------------------------------------------------------------------------
    def summarize(self, counts=None, scale=1.0, detail_kinds=KINDS):
        """{"loss_scale", "skipped", "formats": {F: {KIND: {"sites": {SITE: stats}, "total": stats,
        "recommended_log2_scale", "window": [lo, hi] or None}}}} for counts (default: the run totals, whose
        values carry the scales of their steps: pass scale when it did not change). stats are
        mpsim.UnderflowCounter.underflow(0) at the values as counted (scale included), with the fractions
        zero / subnormal / overflow of the non-zero finite values beside; log2 scales are absolute (log2 of
        the loss scale that would give them). Per-site stats, window and recommendation for the kinds in
        detail_kinds only, the others get their total (step() details the activations and their gradients:
        the weight gradients' details would double a sampled step's cost; summarize() of the totals has them)."""
        counts = self.totals if counts is None else counts
        log2_s = math.log2(scale) if scale > 0 else 0.0
        out = {"loss_scale": scale, "formats": {}}
        for f in self.formats:
            per_kind = {}
            for kind, sites in counts.items():
                if not sites:
                    continue
                total = None
                rows = {}
                # The mass lost over every site, the sites' sums added in sorted site order (fixed bits): for
                # the weight gradients, that of the whole step's update direction.
                mass_total = None
                for site in sorted(sites):
                    c = sites[site].counters[f]
                    mass = sites[site].mass.get(f) if sites[site].mass is not None else None
                    if kind in detail_kinds:
                        rows[site] = _stats(c, mass)
                    if total is None:
                        # A copy (the sum with an empty counter): a new counter would find its format's
                        # thresholds again, about seventy times the cost.
                        total = self._empty[f] + c
                    else:
                        total.merge(c)
                    if mass is not None:
                        mass_total = mass + mpsim.MassLostCounter(f, 0, self.mode) if mass_total is None \
                            else mass_total.merge(mass)
                entry = {"sites": rows, "total": _stats(total, mass_total)}
                if kind not in detail_kinds:
                    per_kind[kind] = entry
                    continue
                rec = total.recommended_log2_scale(self.margin)
                entry["recommended_log2_scale"] = None if rec is None else rec + log2_s
                # Over the absolute loss scales 2^-128 .. 2^128, whatever the scale the values carry; no window
                # without a non-zero finite value (an all-NaN or all-zero step: no scale is known to be safe).
                shift = round(log2_s)
                window = (best_window(total, -SWEEP_LOG2 - shift, SWEEP_LOG2 - shift)
                          if total.range_counts(0)[0] else None)
                entry["window"] = None if window is None else [window[0] + log2_s, window[1] + log2_s]
                per_kind[kind] = entry
            out["formats"][f] = per_kind
        wg = out["formats"][self.formats[0]].get("weight_grad")
        if wg:
            # GradScaler skips a step whose gradients hold inf or NaN: the total's counts of them (those of the
            # values as given, whatever the format), not a histogram per site.
            out["skipped"] = wg["total"]["nan_num"] + wg["total"]["inf_num"] > 0
        else:
            out["skipped"] = None
        return out

    def _row(self, result):
        seen = set(self._activation_sites)
        for f in self.formats:
            act = result["formats"][f].get("activation_grad")
            seen.update(act["sites"] if act else ())
        self._activation_sites = sorted(seen)
        cols = {"step": result["step"], "loss": result["loss"], "metric": None, "scale": result["loss_scale"],
                "skipped": None if result["skipped"] is None else int(result["skipped"]),
                "grad_norm": result["grad_norm"], "swallowed": None}
        for i, f in enumerate(self.formats):
            act = result["formats"][f].get("activation_grad")
            suffix = "" if i == 0 else f"@{f}"
            for site in self._activation_sites:
                st = act["sites"].get(site) if act else None
                for key in ("zero", "subnormal", "overflow") + (MASS_COLUMNS if f in self.mass_formats else ()):
                    cols[f"{site}:{key}{suffix}"] = None if st is None else st.get(key)
        for f in self.formats:
            act = result["formats"][f].get("activation_grad")
            for key, name in (("zero", "underflow"), ("subnormal", "subnormal"), ("overflow", "overflow")):
                cols[f"{f}:{name}"] = act["total"][key] if act else None
            cols[f"{f}:recommended_log2_scale"] = act["recommended_log2_scale"] if act else None
            window = act["window"] if act else None
            cols[f"{f}:window_lo"] = window[0] if window else None
            cols[f"{f}:window_hi"] = window[1] if window else None
            if f in self.mass_formats:
                for key in MASS_COLUMNS:
                    cols[f"{f}:{key}"] = act["total"].get(key) if act else None
            wg = result["formats"][f].get("weight_grad")
            for key, name in (("zero", "w_underflow"), ("subnormal", "w_subnormal"), ("overflow", "w_overflow")):
                cols[f"{f}:{name}"] = wg["total"][key] if wg else None
            if f in self.mass_formats:  # the whole step's update direction: every parameter's gradient as one vector
                for key in MASS_COLUMNS:
                    cols[f"{f}:w_{key}"] = wg["total"].get(key) if wg else None
        rec = result.get("recipe")
        if rec is not None:
            # The recipe's operands, in its formats: SITE:KEY@recipe per LAYER/ROLE, then the totals over every
            # operand (recipe:underflow, ...) and over the gradient operands (recipe:dy_underflow, ...).
            self._recipe_sites = sorted(set(self._recipe_sites) | set(rec["sites"]))
            keys = ("zero", "subnormal", "overflow") + MASS_COLUMNS
            for site in self._recipe_sites:
                st = rec["sites"].get(site)
                for key in keys:
                    cols[f"{site}:{key}@recipe"] = None if st is None else st.get(key)
            for prefix, st in (("", rec["total"]), ("dy_", rec["dy_total"])):
                for key, name in zip(keys, ("underflow", "subnormal", "overflow") + MASS_COLUMNS):
                    cols[f"recipe:{prefix}{name}"] = st.get(key)
        return cols

    def _write_step(self, result):
        row = self._row(result)
        # A site first seen now (a module that did not run before) adds columns; the file is rewritten whole.
        self._columns = (self._columns or []) + [c for c in row if c not in (self._columns or [])]
        self._rows.append(row)
        sampled_index = (result["step"] - 1) // self.every
        if self.hist_every and sampled_index % self.hist_every == 0:
            # Files are written on histogram steps (and by flush() and close()): a sampled step then costs
            # no file system work, which on a loaded machine takes milliseconds per file.
            self._write_hist(result)
            self.flush()

    def flush(self):
        """Writes steps.csv (every sampled step so far) and run.json now (rank 0; also done on histogram
        steps and by close()). Rows are appended to the file this monitor wrote; it is rewritten whole
        (through a temporary file and a rename) only when a new site adds columns, so a long run's flushes
        cost what their new rows cost."""
        if self.out is None or _dist.rank(self.group) != 0:
            return
        columns = self._columns or ["step", "loss", "metric", "scale", "skipped", "grad_norm", "swallowed"]
        path = self.out / "steps.csv"
        whole = columns != self._csv_columns or not path.exists()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if whole:
            w.writerow(columns)
        for r in self._rows[0 if whole else self._csv_rows:]:
            w.writerow([_number(r.get(c)) for c in columns])
        if whole:
            _atomic_write(path, buf.getvalue())
        else:
            with open(path, "a") as f:
                f.write(buf.getvalue())
        self._csv_columns, self._csv_rows = list(columns), len(self._rows)
        self._write_run()

    def _write_hist(self, result):
        snap = {"step": result["step"], "model": type(self.model).__name__, "policy": self.policy,
                "scaler": "none" if self.scaler is None else type(self.scaler).__name__,
                "loss_scale": result["loss_scale"], "loss_divisor_log2": 0,
                "note": "activation_grad (the gradient arriving at each module's output), weight_grad (each "
                        "parameter's .grad as backward accumulated it) and activation: the values as PyTorch "
                        "produced them, the loss scale included (mpsim.torch.GradientMonitor)",
                "schema": "mpsim-train-hist-1", "mpsim_version": getattr(mpsim, "__version__", "")}
        for kind, sites in self._counts.items():
            if sites or kind != "activation":
                snap[kind] = {s: json.loads(c.hist.to_json()) for s, c in sorted(sites.items())}
        self._hist_steps.append(result["step"])
        _atomic_write(self.out / "hist" / f"step_{result['step']:06d}.json", json.dumps(snap, indent=1) + "\n")

    def _write_run(self):
        run = {"schema": "mpsim-train-run-1", "mpsim_version": getattr(mpsim, "__version__", ""),
               "config": {"model": type(self.model).__name__, "policy": self.policy, "formats": list(self.formats),
                          "mode": self.mode, "every": self.every, "hist_every": self.hist_every,
                          "margin": self.margin, "recipe": self.recipe, "source": "mpsim.torch.GradientMonitor"},
               "activation_grad_sites": self._activation_sites, "histogram_steps": self._hist_steps,
               "steps_seen": self.step_number, "files": {"steps": "steps.csv", "histograms": "hist/step_NNNNNN.json",
                                                         "underflow": "underflow.json"}}
        _atomic_write(self.out / "run.json", json.dumps(run, indent=2) + "\n")

    def report_json(self):
        """Per format and kind, the JSON report `mpsim underflow --sweep` writes, one tensor per site, of the
        run totals (every sampled step so far; every rank's after all_reduce()), the values as counted (loss
        scale included)."""
        totals = self.merged_totals if self.merged_totals is not None else self.totals
        rep = {"schema": "mpsim-torch-underflow-1", "formats": {}}
        for f in self.formats:
            rep["formats"][f] = {}
            for kind, sites in totals.items():
                if not sites:
                    continue
                r = json.loads(mpsim.underflow_report_json({site: c.counters[f] for site, c in sorted(sites.items())},
                                                           margin=self.margin, sweep=True))
                masses = [c.mass[f] for _, c in sorted(sites.items()) if c.mass is not None and f in c.mass]
                if len(masses) == len(sites):
                    # The sites' sums added in the report's order, as `mpsim underflow` adds its tensors' into
                    # its total (tools/mpsim/underflow.cpp).
                    total = mpsim.MassLostCounter(f, 0, self.mode)
                    for t, m in zip(r["tensors"], masses):
                        t.update(m.stats())
                        total.merge(m)
                    r["total"].update(total.stats())
                rep["formats"][f][kind] = r
        if self.recipe is not None:
            rep["recipe"] = _recipe_summary(self.recipe, self.recipe_totals)
        return rep

    def all_reduce(self, group=None):
        """Merges every rank's run totals (one SUM all-reduce of the int64 counts, one MAX all-reduce for amax
        and amin) into merged_totals, on every rank; rank 0 writes underflow.json from them. A collective:
        every rank calls it. With reduce="auto" the totals are already merged step by step and nothing is
        exchanged. Returns merged_totals ({kind: {site: SiteCounts}})."""
        group = self.group if group is None else group
        if self.reduce == "never" and _dist.active(group):
            merged = {kind: dict(sites) for kind, sites in self.totals.items()}  # the local counters stay
            _dist.all_reduce_counts(merged, self.formats, self.mode, group)
        else:
            merged = self.totals
        self.merged_totals = merged
        if self.out is not None and _dist.rank(group) == 0:
            _atomic_write(self.out / "underflow.json", json.dumps(self.report_json(), indent=1) + "\n")
        return merged

    def remove(self):
        """Removes the hooks (the model runs as if never monitored)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        for site in self._observed_sites:
            site.observers[:] = [o for o in site.observers if getattr(o, "monitor", None) is not self._ref]
        self._observed_sites = []
        if self._recipe_emulation is not None:
            obs = self._recipe_emulation.quantize_observers
            obs[:] = [o for o in obs if getattr(o, "monitor", None) is not self._ref]
            self._recipe_emulation = None

    def close(self):
        """Removes the hooks and writes underflow.json, steps.csv and run.json (rank 0)."""
        self.remove()
        if self.out is not None and _dist.rank(self.group) == 0:
            _atomic_write(self.out / "underflow.json", json.dumps(self.report_json(), indent=1) + "\n")
            self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def best_window(counter, lo, hi):
    """(k_lo, k_hi): the scales 2^k, lo <= k <= hi, at which nothing overflows and underflow is least, or
    None when every one overflows; what UnderflowCounter.sweep(lo, hi)["best_window"] gives, found from
    counts at a few single scales instead of the whole sweep (UnderflowCounter.best_window, the library's
    search: lib/mpsim/analysis/underflow.hpp best_window)."""
    return counter.best_window(lo, hi)


def _stats(counter, mass=None):
    """UnderflowCounter.underflow(0) (the TE-named statistics), with zero / subnormal / overflow beside: the
    fractions of the non-zero finite values, from the counts (the simulator's steps.csv columns); with the
    gradient mass lost (MassLostCounter.stats(): l1_lost, l2sq_lost, cosine and their counts) when given."""
    st = dict(counter.underflow(0))
    nonzero_finite = st["nonzero_finite_num"]
    for key, num in (("zero", "underflows_num"), ("subnormal", "subnormals_num"), ("overflow", "overflows_num")):
        st[key] = st[num] / nonzero_finite if nonzero_finite else 0.0
    if mass is not None:
        st.update(mass.stats())
    return st
