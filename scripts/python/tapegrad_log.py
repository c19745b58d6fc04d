"""tapegrad_log: write your own training run's log in tapegrad's format (docs/logs.md), so that
`tapegrad-logs summarize|plot|logat` plot it and judge it beside tapegrad's runs.

    from tapegrad_log import RunLog
    with RunLog("runs/mine_none_s1.tsv", task="text", scale="none", steps=2000, seq_len=256,
                layers=4, heads=8, seed=1, d_head=128, framework="torch") as log:
        for step in range(2001):
            ...                                  # your training step: loss, and the attention weights
            if step % 100 == 0:
                log.row(step, loss.item(), attn=[w for w in weights])   # per layer (B, H, Tq, Tk)

Per head, the entropy is computed as tapegrad does (ops/attention.c): −Σ_j p_ij ln p_ij (0 ln 0 =
0), averaged over the batch and the query rows, in nats; divided by the entropy of uniform
attention over the keys each row sees (mean over rows of ln(i+1) under a causal mask, ln T_k
without) it is the nent_ columns the tools read. Pass `entropy=` (nats, per layer and head) instead
of `attn=` when you measure it yourself, `max_logit=` (per layer, or per layer and head: the largest
logit after scaling) to log the logits' growth, `val_loss=` on the rows where you evaluated.

Standard library only; a torch tensor (or anything with .tolist()) is read as a nested list, and
torch's own ops are used for weights when they are torch tensors (no copy to Python floats).
The file is written one whole line at a time, flushed: a run killed at any moment leaves only
complete lines. An existing file is refused unless overwrite=True.
"""
import math
import os

__all__ = ["RunLog", "head_entropy", "uniform_entropy", "LogFormatError"]
FORMAT = "tapegrad log 1 (docs/logs.md)"


class LogFormatError(ValueError):
    pass


def uniform_entropy(seq_len, causal=True):
    """The entropy of uniform attention, mean over the query rows: ln(i+1) for row i under a causal
    mask, ln(seq_len) without (tg_attn_uniform_entropy)."""
    if seq_len < 1:
        raise LogFormatError("seq_len must be at least 1 (got %r)" % (seq_len,))
    if not causal:
        return math.log(seq_len)
    return sum(math.log(i + 1) for i in range(seq_len)) / seq_len


def _is_torch(x):
    return hasattr(x, "detach") and hasattr(x, "dim")


def head_entropy(weights):
    """Per head, the mean over batch and query rows of −Σ p ln p (nats) of weights (B, H, Tq, Tk)
    (or (H, Tq, Tk)): a list of H floats."""
    if _is_torch(weights):
        w = weights.detach().double()
        if w.dim() == 3:
            w = w.unsqueeze(0)
        if w.dim() != 4:
            raise LogFormatError("attention weights must be (B, H, Tq, Tk) or (H, Tq, Tk), got shape %s"
                                 % (tuple(w.shape),))
        plogp = w * w.clamp_min(1e-300).log()
        plogp = plogp.masked_fill(w <= 0, 0.0)
        return [float(x) for x in (-plogp.sum(-1)).mean(dim=(0, 2)).tolist()]
    w = weights.tolist() if hasattr(weights, "tolist") else weights
    if w and w[0] and not isinstance(w[0][0][0], (list, tuple)):   # (H, Tq, Tk)
        w = [w]
    H = len(w[0])
    out = []
    for h in range(H):
        s, n = 0.0, 0
        for b in range(len(w)):
            for row in w[b][h]:
                s -= sum(p * math.log(p) for p in row if p > 0)
                n += 1
        out.append(s / n)
    return out


class RunLog:
    """One run's log. Header keys: the ones the tools need (task, scale, steps, ref_entropy_uniform),
    the ones runs are paired by (seed, d_head, optim, lr, ... every keyword you pass: a setting,
    docs/logs.md#which-runs-are-compared), and framework. Columns: step, loss, ent_mean, ent_l*_h*,
    maxlogit_l* (max_logit=True), nent_l*_h*, val_loss (val_loss=True)."""

    def __init__(self, path, *, task, scale, steps, layers, heads, seq_len=None, causal=True,
                 entropy_uniform=None, seed="-", d_head="-", framework="torch", max_logit=False,
                 val_loss=False, overwrite=False, program="tapegrad_log", **settings):
        if not task or not scale:
            raise LogFormatError("task and scale are required (the verdicts pair runs by them)")
        if int(steps) < 1:
            raise LogFormatError("steps must be at least 1 (what '10% of the run' is), got %r" % (steps,))
        if int(layers) < 1 or int(heads) < 1:
            raise LogFormatError("layers and heads must be at least 1 (got %r, %r)" % (layers, heads))
        if entropy_uniform is None:
            if seq_len is None:
                raise LogFormatError("seq_len (or entropy_uniform) is required: the entropy of uniform "
                                     "attention is what the heads' entropy is divided by")
            entropy_uniform = uniform_entropy(int(seq_len), causal)
        self.path, self.layers, self.heads = path, int(layers), int(heads)
        self.unif, self.has_mx, self.has_val = float(entropy_uniform), bool(max_logit), bool(val_loss)
        self.last_step = None
        header = {"task": task, "scale": scale, "steps": int(steps), "seed": seed, "d_head": d_head,
                  "framework": framework, "layers": self.layers, "heads": self.heads}
        if seq_len is not None:
            header["seq_len"] = int(seq_len)
        for k, v in settings.items():
            if "=" in k or "\n" in str(v) or k in header:
                raise LogFormatError("setting %r: a key without '=' and a value on one line, not one of %s"
                                     % (k, ", ".join(header)))
            header[k] = v
        cols = ["step", "loss", "ent_mean"]
        lh = [(l, h) for l in range(self.layers) for h in range(self.heads)]
        cols += ["ent_l%d_h%d" % x for x in lh]
        if self.has_mx:
            cols += ["maxlogit_l%d" % l for l in range(self.layers)]
        cols += ["nent_l%d_h%d" % x for x in lh]
        if self.has_val:
            cols.append("val_loss")
        self.ncols = len(cols)
        lines = ["# tapegrad %s" % program, "# log_format=%s" % FORMAT]
        lines += ["# %s=%s" % (k, v) for k, v in header.items()]
        lines.append("# ref_entropy_uniform=%.6f" % self.unif)
        lines.append("\t".join(cols))
        # the header whole or nothing: written to a temporary name, then renamed
        if os.path.exists(path) and not overwrite:
            raise LogFormatError("%s exists (overwrite=True to replace it)" % path)
        tmp = "%s.tmp%d" % (path, os.getpid())
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
        self.f = open(path, "a", encoding="utf-8")

    def _per_layer(self, what, x, per_head):
        x = x.tolist() if hasattr(x, "tolist") else list(x)
        if len(x) != self.layers:
            raise LogFormatError("%s: %d layers given, the log has %d" % (what, len(x), self.layers))
        if per_head:
            for l, v in enumerate(x):
                v = v.tolist() if hasattr(v, "tolist") else v
                if len(v) != self.heads:
                    raise LogFormatError("%s: layer %d has %d heads, the log has %d" % (what, l, len(v), self.heads))
        return x

    def row(self, step, loss, *, attn=None, entropy=None, max_logit=None, val_loss=None):
        """One logged step: the training loss, and the heads' entropy from attn (per layer, weights
        (B, H, Tq, Tk): rows sum to 1) or entropy (per layer, H entropies in nats). Steps increase."""
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            raise LogFormatError("step %d after step %d: steps must increase" % (step, self.last_step))
        if (attn is None) == (entropy is None):
            raise LogFormatError("pass exactly one of attn= (the weights) and entropy= (per head, nats)")
        if attn is not None:
            ents = [head_entropy(w) for w in self._per_layer("attn", attn, False)]
            for l, e in enumerate(ents):
                if len(e) != self.heads:
                    raise LogFormatError("attn: layer %d has %d heads, the log has %d" % (l, len(e), self.heads))
        else:
            ents = [[float(v) for v in (e.tolist() if hasattr(e, "tolist") else e)]
                    for e in self._per_layer("entropy", entropy, True)]
        flat = [e for layer in ents for e in layer]
        vals = [step, float(loss), sum(flat) / len(flat)] + flat
        if self.has_mx:
            if max_logit is None:
                vals += [math.nan] * self.layers   # not measured this row
            else:
                for m in self._per_layer("max_logit", max_logit, False):   # a layer's, or its heads' (the largest)
                    m = m.tolist() if hasattr(m, "tolist") else m
                    vals.append(max(float(v) for v in m) if isinstance(m, (list, tuple)) else float(m))
        elif max_logit is not None:
            raise LogFormatError("max_logit given, but the log was opened without max_logit=True")
        vals += [e / self.unif if self.unif > 0 else 1.0 for e in flat]
        if self.has_val:
            vals.append(math.nan if val_loss is None else float(val_loss))
        elif val_loss is not None:
            raise LogFormatError("val_loss given, but the log was opened without val_loss=True")
        self.f.write("\t".join([str(step)] + ["%.6g" % v for v in vals[1:]]) + "\n")
        self.f.flush()
        self.last_step = step

    def close(self):
        if self.f:
            self.f.close()
            self.f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
