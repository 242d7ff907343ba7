"""PyTorch versions of mpsim's two models, layer for layer, with the simulator's rounding sites.

They mirror lib/mpsim/models/ssd_lite.cpp and lstm_lm.cpp (and the layers of lib/mpsim/nn/) with
torch.nn.functional operations and autograd, so that a step of the C++ simulator, whose backward passes are
written by hand, can be checked against PyTorch (tests/python/test_sim_vs_torch.py, docs/validation.md):

  * SsdLite: conv1 3x3 -> relu -> maxpool 2 -> conv2 -> relu -> pool = f1 -> conv3 -> relu -> pool = f2;
    head1 on f1, head2 on f2 (3x3 convolutions, 3 anchors x (4 offsets + 4 logits)); SSD's multibox loss
    (matching at IoU 0.5, hard negatives 3:1, smooth L1 + cross-entropy over the matched count).
  * LstmLm: embedding (V, 32) -> one LSTM layer (gate order i, f, g, o as torch.nn.LSTM; one bias)
    -> linear (V) -> mean cross-entropy over the T x B tokens. The LSTM is unrolled over time so that the
    per-step sites (h_in, hh_out, gates_grad, h_grad) exist; `torch_lstm_reference` runs torch.nn.LSTM on
    the same weights to check the unrolled cell against PyTorch's own.

`Sites` puts a rounding function at the simulator's sites (lib/mpsim/models/README.md "Precision sites"):
`fwd` rounds a value in the forward pass (matmul_input, matmul_output), `bwd` rounds the gradient that flows
back through a value (activation_grad, weight_grad), and each records what it saw (before rounding) and
counts what rounding did, with the bulk engine's Stats names (underflow, subnormal, overflow, ...).

Weights and batches come from a layer dump of the simulator (lib/mpsim/models/layer_dump.hpp): `load_dump`.
"""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

# The classes of rounding sites (lib/mpsim/nn/policy.hpp OpClass).
MATMUL_INPUT, MATMUL_OUTPUT, ACTIVATION_GRAD, WEIGHT_GRAD = "matmul_input", "matmul_output", "activation_grad", "weight_grad"
# mixed-fp16 (lib/mpsim/nn/policy.cpp): these four classes in fp16, weights kept in fp32.
MIXED_CLASSES = frozenset({MATMUL_INPUT, MATMUL_OUTPUT, ACTIVATION_GRAD, WEIGHT_GRAD})
FP16_MIN_NORMAL = 2.0 ** -14  # IEEE 754 binary16


def to_fp16(x):
    """torch's own float -> half conversion (round to nearest even, subnormals kept, overflow to inf), back."""
    return x.to(torch.float16).to(x.dtype)


def load_dump(path):
    """A layer dump as (metadata dict with JSON values decoded, {name: numpy float32 array})."""
    from safetensors.numpy import load_file

    tensors = load_file(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    meta = {k: json.loads(v) for k, v in header["__metadata__"].items()}
    # The dump's site_stats carry `mpsim round --stats-json`'s names (lib/mpsim/format/stats_fields.hpp); a
    # dump of schema mpsim-layer-dump-1 spelled overflow_num as overflow.
    for st in meta.get("site_stats", {}).values():
        if "overflow" in st:
            st["overflow_num"] = st.pop("overflow")
    return meta, tensors


class Sites:
    """Rounding at named sites, recorded: values[site][index] is the tensor the site saw before rounding
    (index: the time step for the LSTM's per-step sites, else 0); stats[site] counts what rounding did."""

    def __init__(self, rounds=frozenset(), round_fn=to_fp16, min_normal=FP16_MIN_NORMAL, record=True):
        self.rounds = frozenset(rounds)
        self.round_fn = round_fn
        self.min_normal = min_normal
        self.record = record
        self.values = {}
        self.classes = {}
        self.stats = {}

    def apply(self, site, cls, index, x):
        self.classes[site] = cls
        if self.record:
            self.values.setdefault(site, {})[index] = x.detach().clone()
        if cls not in self.rounds:
            return x
        r = self.round_fn(x)
        finite = torch.isfinite(x)
        nonzero = finite & (x != 0)
        s = self.stats.setdefault(site, dict.fromkeys(
            ("count", "zero_in", "exact", "rounded", "underflow", "subnormal", "overflow"), 0))
        s["count"] += x.numel()
        s["zero_in"] += int((x == 0).sum())
        s["exact"] += int((nonzero & (r == x)).sum())
        s["rounded"] += int((nonzero & (r != x)).sum())
        s["underflow"] += int((nonzero & (r == 0)).sum())
        s["subnormal"] += int(((r != 0) & (r.abs() < self.min_normal)).sum())
        s["overflow"] += int((finite & ~torch.isfinite(r)).sum())
        return r

    def fwd(self, site, cls, x, index=0):
        return _RoundForward.apply(x, self, site, cls, index)

    def bwd(self, site, cls, x, index=0):
        return _RoundBackward.apply(x, self, site, cls, index)

    def stacked(self, site, order):
        """The recorded tensors of `site` for the indices in `order`, flattened, as rows of a numpy array."""
        return np.stack([self.values[site][i].reshape(-1).double().numpy() for i in order])


class _RoundForward(torch.autograd.Function):
    """Rounds in the forward pass; the gradient passes unchanged (the simulator rounds no gradient there)."""

    @staticmethod
    def forward(ctx, x, sites, site, cls, index):
        return sites.apply(site, cls, index, x)

    @staticmethod
    def backward(ctx, g):
        return g, None, None, None, None


class _RoundBackward(torch.autograd.Function):
    """The identity forward; rounds the gradient flowing back through it (autograd has summed every use)."""

    @staticmethod
    def forward(ctx, x, sites, site, cls, index):
        ctx.sites, ctx.site, ctx.cls, ctx.index = sites, site, cls, index
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.sites.apply(ctx.site, ctx.cls, ctx.index, g.contiguous()), None, None, None, None


# ---------------------------------------------------------------- ssd ----------------------------------

SSD_ANCHORS = (1.0, 2.0, 0.5)  # aspect ratios at every cell
SSD_MAPS = ((8, 0.3), (4, 0.5))  # (cells per side, box scale): head1 on the 8x8 map, head2 on 4x4
SSD_CLASSES = 4  # background + square, disk, triangle
SSD_CONVS = ("conv1", "conv2", "conv3", "head1", "head2")


def default_boxes():
    """(D, 4) float64 boxes (cx, cy, w, h) in the order map, row, column, aspect ratio (SSD eq. 4)."""
    out = []
    for f, scale in SSD_MAPS:
        for y in range(f):
            for x in range(f):
                for r in SSD_ANCHORS:
                    out.append(((x + 0.5) / f, (y + 0.5) / f, scale * math.sqrt(r), scale / math.sqrt(r)))
    return np.array(out)


def iou(a, b):
    """IoU of boxes a (N, 4) and b (M, 4), centre-size form, as (N, M) float64."""
    ax0, ax1 = a[:, None, 0] - a[:, None, 2] / 2, a[:, None, 0] + a[:, None, 2] / 2
    ay0, ay1 = a[:, None, 1] - a[:, None, 3] / 2, a[:, None, 1] + a[:, None, 3] / 2
    bx0, bx1 = b[None, :, 0] - b[None, :, 2] / 2, b[None, :, 0] + b[None, :, 2] / 2
    by0, by1 = b[None, :, 1] - b[None, :, 3] / 2, b[None, :, 1] + b[None, :, 3] / 2
    ix = np.maximum(0.0, np.minimum(ax1, bx1) - np.maximum(ax0, bx0))
    iy = np.maximum(0.0, np.minimum(ay1, by1) - np.maximum(ay0, by0))
    inter = ix * iy
    union = a[:, None, 2] * a[:, None, 3] + b[None, :, 2] * b[None, :, 3] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match(defaults, truths, threshold=0.5):
    """SSD's matching (ssd.pytorch match()): per default box the index of its ground truth or -1."""
    m = np.full(len(defaults), -1)
    if len(truths) == 0:
        return m
    ov = iou(defaults, np.array([t[:4] for t in truths]))  # (D, G)
    best_truth = ov.argmax(axis=1)
    m[ov.max(axis=1) >= threshold] = best_truth[ov.max(axis=1) >= threshold]
    for g, d in enumerate(ov.argmax(axis=0)):  # every truth keeps its best box; the last truth wins
        m[d] = g
    return m


def encode(truth, d):
    """SSD's offsets with variances 0.1 / 0.2 (ssd.pytorch box_utils.encode), float64."""
    return [(truth[0] - d[0]) / (0.1 * d[2]), (truth[1] - d[1]) / (0.1 * d[3]),
            math.log(truth[2] / d[2]) / 0.2, math.log(truth[3] / d[3]) / 0.2]


def multibox_loss(loc, conf, truths, defaults, neg_ratio=3):
    """SSD's multibox loss over the batch: (loss, positives mask (B, D), mined negatives mask (B, D)).
    loc (B, D, 4), conf (B, D, NC) tensors; truths per image [[cx, cy, w, h, label], ...]."""
    B, D, _ = loc.shape
    pos = torch.zeros(B, D, dtype=torch.bool)
    neg = torch.zeros(B, D, dtype=torch.bool)
    labels = torch.zeros(B, D, dtype=torch.long)
    targets = torch.zeros(B, D, 4, dtype=loc.dtype)
    for b in range(B):
        m = match(defaults, truths[b])
        for d in np.nonzero(m >= 0)[0]:
            t = truths[b][m[d]]
            pos[b, d] = True
            labels[b, d] = int(t[4])
            targets[b, d] = torch.tensor(encode(t, defaults[d]), dtype=torch.float32).to(loc.dtype)
    ce = F.cross_entropy(conf.reshape(B * D, -1), labels.reshape(-1), reduction="none").reshape(B, D)
    with torch.no_grad():  # hard negatives: the highest background losses, 3 per positive, per image
        for b in range(B):
            cand = torch.nonzero(~pos[b]).reshape(-1)
            keep = min(neg_ratio * int(pos[b].sum()), len(cand))
            order = torch.sort(ce[b, cand], descending=True, stable=True).indices[:keep]
            neg[b, cand[order]] = True
    matched = int(pos.sum())
    loc_loss = F.smooth_l1_loss(loc[pos], targets[pos], reduction="sum", beta=1.0)
    conf_loss = ce[pos | neg].sum()
    return (loc_loss + conf_loss) / matched, pos, neg


class SsdLite:
    """The ssd model's forward pass and loss; parameters from a dump (param/<conv>/weight (OC, C*9))."""

    def __init__(self, tensors, dtype=torch.float32):
        self.p = {}
        for name in SSD_CONVS:
            w = torch.tensor(tensors[f"param/{name}/weight"], dtype=dtype)
            b = torch.tensor(tensors[f"param/{name}/bias"], dtype=dtype)
            oc = b.numel()
            self.p[f"{name}/weight"] = w.reshape(oc, -1, 3, 3).clone().requires_grad_()
            self.p[f"{name}/bias"] = b.clone().requires_grad_()
        self.dtype = dtype

    def conv(self, name, x, sites):
        if x.requires_grad:
            x = sites.bwd(f"{name}/in_grad", ACTIVATION_GRAD, x)
        x = sites.fwd(f"{name}/in", MATMUL_INPUT, x)
        w = sites.bwd(f"{name}/w_grad", WEIGHT_GRAD, sites.fwd(f"{name}/w", MATMUL_INPUT, self.p[f"{name}/weight"]))
        b = sites.bwd(f"{name}/b_grad", WEIGHT_GRAD, self.p[f"{name}/bias"])
        return sites.fwd(f"{name}/out", MATMUL_OUTPUT, F.conv2d(x, w, b, padding=1))

    def forward(self, images, sites):
        """Head outputs (head1 (B, 24, 8, 8), head2 (B, 24, 4, 4)), each with its out_grad site."""
        x = torch.as_tensor(images, dtype=self.dtype)
        p0 = F.max_pool2d(F.relu(self.conv("conv1", x, sites)), 2)
        f1 = sites.bwd("f1/grad", ACTIVATION_GRAD, F.max_pool2d(F.relu(self.conv("conv2", p0, sites)), 2))
        f2 = F.max_pool2d(F.relu(self.conv("conv3", f1, sites)), 2)
        h1 = sites.bwd("head1/out_grad", ACTIVATION_GRAD, self.conv("head1", f1, sites))
        h2 = sites.bwd("head2/out_grad", ACTIVATION_GRAD, self.conv("head2", f2, sites))
        return h1, h2

    @staticmethod
    def gather(heads):
        """Head outputs -> loc (B, D, 4), conf (B, D, 4) in default-box order: channel a*4 + k is anchor
        a's offset k, 12 + a*4 + k its logit k (ssd_lite.cpp for_each_head_entry)."""
        locs, confs = [], []
        for h in heads:
            B = h.shape[0]
            t = h.permute(0, 2, 3, 1)  # (B, f, f, 24)
            A = len(SSD_ANCHORS)
            locs.append(t[..., :A * 4].reshape(B, -1, 4))
            confs.append(t[..., A * 4:].reshape(B, -1, SSD_CLASSES))
        return torch.cat(locs, dim=1), torch.cat(confs, dim=1)

    def step(self, images, truths, sites, loss_scale=1.0):
        """Forward, multibox loss, backward of loss * loss_scale. Returns (loss, positives, negatives)."""
        loc, conf = self.gather(self.forward(images, sites))
        loss, pos, neg = multibox_loss(loc, conf, truths, default_boxes())
        (loss * loss_scale).backward()
        return loss.item(), pos, neg

    def grads(self):
        return {k: v.grad.detach().reshape(-1).double().numpy() for k, v in self.p.items()}


# ---------------------------------------------------------------- lstm ---------------------------------

LSTM_PARAMS = ("embed/weight", "lstm/w_ih", "lstm/w_hh", "lstm/bias", "fc/weight", "fc/bias")


class LstmLm:
    """The lstm model's forward pass and loss; parameters from a dump (the C++ names and layouts)."""

    def __init__(self, tensors, hidden, dtype=torch.float32):
        self.H = hidden
        self.p = {k: torch.tensor(tensors[f"param/{k}"], dtype=dtype).clone() for k in LSTM_PARAMS}
        V = self.p["fc/bias"].numel()
        self.p["embed/weight"] = self.p["embed/weight"].reshape(V, -1)
        self.p["lstm/w_ih"] = self.p["lstm/w_ih"].reshape(4 * hidden, -1)
        self.p["lstm/w_hh"] = self.p["lstm/w_hh"].reshape(4 * hidden, hidden)
        self.p["fc/weight"] = self.p["fc/weight"].reshape(V, hidden)
        for v in self.p.values():
            v.requires_grad_()
        self.dtype = dtype

    def step(self, inputs, targets, sites, loss_scale=1.0):
        """inputs, targets (T, B) token ids. Forward, mean cross-entropy, backward of loss * loss_scale."""
        inputs = torch.as_tensor(np.asarray(inputs), dtype=torch.long)
        targets = torch.as_tensor(np.asarray(targets), dtype=torch.long)
        T, B = inputs.shape
        H = self.H
        p = self.p
        emb = sites.bwd("embed/w_grad", WEIGHT_GRAD, p["embed/weight"])
        x = F.embedding(inputs.reshape(-1), emb)  # (T*B, I), row t*B + b
        x = sites.fwd("lstm/in", MATMUL_INPUT, sites.bwd("lstm/in_grad", ACTIVATION_GRAD, x))
        w_ih = sites.bwd("lstm/w_ih_grad", WEIGHT_GRAD, sites.fwd("lstm/w_ih", MATMUL_INPUT, p["lstm/w_ih"]))
        w_hh = sites.bwd("lstm/w_hh_grad", WEIGHT_GRAD, sites.fwd("lstm/w_hh", MATMUL_INPUT, p["lstm/w_hh"]))
        bias = sites.bwd("lstm/b_grad", WEIGHT_GRAD, p["lstm/bias"])
        pre_x = sites.fwd("lstm/ih_out", MATMUL_OUTPUT, x @ w_ih.t())
        h = torch.zeros(B, H, dtype=self.dtype, requires_grad=True)  # h_0 (its gradient is still computed)
        c = torch.zeros(B, H, dtype=self.dtype)
        hs = []
        for t in range(T):
            h_in = sites.fwd("lstm/h_in", MATMUL_INPUT, sites.bwd("lstm/h_grad", ACTIVATION_GRAD, h, t), t)
            pre_h = sites.fwd("lstm/hh_out", MATMUL_OUTPUT, h_in @ w_hh.t(), t)
            a = sites.bwd("lstm/gates_grad", ACTIVATION_GRAD, pre_x[t * B:(t + 1) * B] + pre_h + bias, t)
            i, f, g, o = torch.sigmoid(a[:, :H]), torch.sigmoid(a[:, H:2 * H]), torch.tanh(a[:, 2 * H:3 * H]), \
                torch.sigmoid(a[:, 3 * H:])
            c = f * c + i * g
            h = o * torch.tanh(c)
            hs.append(h)
        h_all = torch.cat(hs)  # (T*B, H)
        h_all = sites.fwd("fc/in", MATMUL_INPUT, sites.bwd("fc/in_grad", ACTIVATION_GRAD, h_all))
        fc_w = sites.bwd("fc/w_grad", WEIGHT_GRAD, sites.fwd("fc/w", MATMUL_INPUT, p["fc/weight"]))
        fc_b = sites.bwd("fc/b_grad", WEIGHT_GRAD, p["fc/bias"])
        logits = sites.bwd("fc/out_grad", ACTIVATION_GRAD, sites.fwd("fc/out", MATMUL_OUTPUT, h_all @ fc_w.t() + fc_b))
        loss = F.cross_entropy(logits, targets.reshape(-1))
        (loss * loss_scale).backward()
        self.hidden_states = h_all.detach()
        return loss.item()

    def grads(self):
        return {k: v.grad.detach().reshape(-1).double().numpy() for k, v in self.p.items()}


def lstm_lm_with_torch_lstm(tensors, hidden, inputs, targets, dtype=torch.float64):
    """The same model with PyTorch's own torch.nn.LSTM in place of the unrolled cell, no rounding: (loss,
    h (T*B, H), {param name: gradient}) of the mean cross-entropy. bias_ih holds the model's one bias and
    bias_hh is 0, so the bias gradient is bias_ih's."""
    V = tensors["param/fc/bias"].size
    t = {k: torch.tensor(tensors[f"param/{k}"], dtype=dtype) for k in LSTM_PARAMS}
    emb = t["embed/weight"].reshape(V, -1).requires_grad_()
    fc_w = t["fc/weight"].reshape(V, hidden).requires_grad_()
    fc_b = t["fc/bias"].requires_grad_()
    lstm = torch.nn.LSTM(emb.shape[1], hidden, dtype=dtype)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(t["lstm/w_ih"].reshape(4 * hidden, -1))
        lstm.weight_hh_l0.copy_(t["lstm/w_hh"].reshape(4 * hidden, hidden))
        lstm.bias_ih_l0.copy_(t["lstm/bias"])
        lstm.bias_hh_l0.zero_()
    inputs = torch.as_tensor(np.asarray(inputs), dtype=torch.long)
    out, _ = lstm(F.embedding(inputs, emb))  # (T, B, H)
    h = out.reshape(-1, hidden)
    loss = F.cross_entropy(h @ fc_w.t() + fc_b, torch.as_tensor(np.asarray(targets), dtype=torch.long).reshape(-1))
    loss.backward()
    grads = {"embed/weight": emb.grad, "lstm/w_ih": lstm.weight_ih_l0.grad, "lstm/w_hh": lstm.weight_hh_l0.grad,
             "lstm/bias": lstm.bias_ih_l0.grad, "fc/weight": fc_w.grad, "fc/bias": fc_b.grad}
    return loss.item(), h.detach(), {k: v.detach().reshape(-1).double().numpy() for k, v in grads.items()}
