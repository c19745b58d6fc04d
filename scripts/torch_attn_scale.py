#!/usr/bin/python3
"""attn_scale in PyTorch: the same toy transformer, task, optimizer, schedule and
TSV log as build/experiments/attn_scale, with PyTorch's own random streams, so
that scripts/plot.sh and scripts/summarize.sh read both. Debian's python3-torch
(PyTorch 1.13, CPU); not needed by the build or the tests.

    /usr/bin/python3 scripts/torch_attn_scale.py --scale none --seed 1 --log runs/torch_none_s1.tsv

Same definitions as experiments/model/model.c, tasks.c and attn_scale.c: the model is
bench_torch.py's (pre-LN, fan-in init, GELU tanh, untied unembedding) with the
scale modes added; hist/recall batches, or --task code: the bytes of the same corpus, split and
validation windows as experiments/model/corpus.c (val_loss with --eval-every); AdamW β = (0.9, 0.95), ε = 1e-8, decay
on matrices and embeddings only; global grad-norm clip; linear warm-up then
cosine to --lr-min; a row every --log-every steps and at the last step, each
computed on the step's batch before its update, the last one with no update
(grad_norm and lr 0). The entropy statistics are tg_attention's: per head, the
mean over batch and query rows of -sum p ln p over the visible keys; maxlogit
per layer: the largest scaled logit of any head; sat per layer: the mean over
heads of the share of rows whose top weight is > 0.99. --kv-heads N: k and v
with N heads, query head h reading head h // (H/N) (repeat_interleave, as
tg_attn_args); --window W: each query sees its W latest keys, its own included
(tg_attn_args window (W - 1, 0)); both named in the header only when set, as
attn_scale does. So are --bias table (a learned [H, T, T] table per layer, init
0, not decayed), --alibi (slopes 2^(-8(h+1)/H)), --softcap C (on the scaled
logits, before bias and ALiBi), --sinks (a learned logit per head in the
softmax denominator, init 0) and --attn-dropout P (in training steps, with
PyTorch's own dropout: masks differ from tapegrad's, in distribution the same).
Parameters come from
torch.manual_seed(--seed), batches from a torch.Generator seeded --seed + 0xda7a:
runs match tapegrad's in distribution, not step by step."""
import argparse
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import Model as BenchModel  # noqa: E402  (the same model, sqrt only)

SCALES = ["sqrt", "none", "dk", "qknorm", "learned", "mult"]


def f32(x):
    """x rounded to float32, as attn_scale stores its float flags."""
    return struct.unpack("f", struct.pack("f", x))[0]


def scale_float(a):
    """model_scale(): the float the attention op multiplies q·k by."""
    r = f32(math.sqrt(a.d_head))
    if a.scale == "none":
        return 1.0
    if a.scale == "dk":
        return f32(1.0 / a.d_head)
    if a.scale == "mult":
        return f32(f32(a.scale_mult) / r)
    return f32(1.0 / r)


class Model(BenchModel):
    """bench_torch.Model plus attn_scale's scale modes, the gpt2 init and the
    attention statistics."""

    def __init__(self, a):
        super().__init__(a.vocab, a.seq_len, a.d_model, a.heads, a.d_head, a.layers)
        self.a, self.scale = a, scale_float(a)
        self.training_step = False   # --attn-dropout: set around the training steps' forward
        # gpt2: every weight and embedding N(0, 0.02²); lm: the embeddings only (matrices
        # keep bench_torch's N(0, 1/fan_in)); gains 1, biases 0
        small = {"gpt2": ("tok", "pos", "wq", "wk", "wv", "wo", "w1", "w2", "wout"), "lm": ("tok", "pos")}
        if a.init in small:
            with torch.no_grad():
                for m in [self] + list(self.layers):
                    for n in small[a.init]:
                        if hasattr(m, n):
                            getattr(m, n).normal_(0.0, 0.02)
        H, dh = a.heads, a.d_head
        self.Hkv = a.kv_heads or H
        if self.Hkv != H:   # Wk, Wv [D, Hkv·dh], drawn as the model's other matrices are
            std = 0.02 if a.init == "gpt2" else a.d_model ** -0.5
            for m in self.layers:
                m.wk = torch.nn.Parameter(torch.randn(a.d_model, self.Hkv * dh) * std)
                m.wv = torch.nn.Parameter(torch.randn(a.d_model, self.Hkv * dh) * std)
        T = a.seq_len   # invisible: later keys, and with --window W keys more than W − 1 back
        hide = torch.ones(T, T, dtype=torch.bool).triu(1)
        if a.window:
            hide |= torch.ones(T, T, dtype=torch.bool).tril(-a.window)
        self.register_buffer("hide", hide)
        pos = torch.arange(T)
        self.register_buffer("dist", (pos.view(T, 1) - pos.view(1, T)).abs().float())   # |j − i|
        self.register_buffer("slopes", torch.tensor([f32(2.0 ** (-8.0 * (h + 1) / H)) for h in range(H)]))
        for m in self.layers:
            if a.bias == "table":
                m.attn_bias = torch.nn.Parameter(torch.zeros(H, T, T))
            if a.sinks:
                m.sinks = torch.nn.Parameter(torch.zeros(H))
        start = math.sqrt(dh) if a.learned_init == "none" else 1.0
        for m in self.layers:
            if a.scale == "qknorm":
                m.qn, m.kn = torch.nn.Parameter(torch.ones(H, dh)), torch.nn.Parameter(torch.ones(self.Hkv, dh))
            if a.scale == "learned":  # s_h itself, or θ_h with s_h = e^θ_h
                v = f32(math.log(f32(start))) if a.learned_param == "log" else f32(start)
                m.hs = torch.nn.Parameter(torch.full((H,), v))

    def head_scales(self, m):
        if self.a.scale != "learned":
            return None
        return m.hs.exp() if self.a.learned_param == "log" else m.hs

    def forward(self, tokens, targets, stats=None):
        B, T = tokens.shape
        H, dh = self.H, self.dh
        x = self.tok[tokens] + self.pos[:T]
        for m in self.layers:
            h = m.ln1(x)
            q = (h @ m.wq).view(B, T, H, dh)
            k, v = ((h @ w).view(B, T, self.Hkv, dh) for w in (m.wk, m.wv))
            if self.a.scale == "qknorm":
                q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * m.qn
                k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * m.kn
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H or Hkv, T, dh]
            if self.Hkv != H:   # query head h reads k, v head h // (H / Hkv)
                k, v = (t.repeat_interleave(H // self.Hkv, dim=1) for t in (k, v))
            hs = self.head_scales(m)
            s = self.scale * (hs.view(1, H, 1, 1) if hs is not None else 1.0)
            logits = (q @ k.transpose(-1, -2)) * s
            if self.a.softcap > 0:   # Gemma 2: the cap first, then bias and ALiBi
                logits = self.a.softcap * torch.tanh(logits / self.a.softcap)
            if self.a.bias == "table":
                logits = logits + m.attn_bias[:, :T, :T]
            if self.a.alibi:
                logits = logits - self.slopes.view(1, H, 1, 1) * self.dist[:T, :T]
            masked = logits.masked_fill(self.hide[:T, :T], float("-inf"))
            if self.a.sinks:   # the sink joins each row's denominator, then leaves
                sk = m.sinks.view(1, H, 1, 1).expand(B, H, T, 1)
                p = torch.cat([masked, sk], -1).softmax(-1)[..., :T]
            else:
                p = masked.softmax(-1)
            if stats is not None:
                stats.append(head_stats(logits.detach(), p.detach(), self.hide[:T, :T],
                                        self.scale * (hs.detach() if hs is not None else torch.ones(H))))
            if self.a.attn_dropout > 0 and self.training_step:
                p = F.dropout(p, self.a.attn_dropout)
            a = p @ v
            x = x + a.transpose(1, 2).reshape(B, T, H * dh) @ m.wo
            x = x + F.gelu(m.ln2(x) @ m.w1 + m.b1, approximate="tanh") @ m.w2 + m.b2
        logits = self.lnf(x) @ self.wout
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-1)


def head_stats(logits, p, mask, mult):
    """tg_attn_stats of one layer, per head: entropy, max logit, saturation; and the multiplier."""
    p64 = p.double()
    plogp = torch.where(p64 > 0, p64 * p64.log(), torch.zeros_like(p64))
    ent = (-plogp.sum(-1)).mean(dim=(0, 2))  # mean over batch and query rows
    maxl = logits.masked_fill(mask, float("-inf")).amax(dim=(0, 2, 3))
    sat = (p.amax(-1) > 0.99).double().mean(dim=(0, 2))
    return ent, maxl, sat, mult.double()


# ---- tasks (experiments/model/tasks.c) --------------------------------------------------
def hist_batch(a, gen):
    B, T, A, V = a.batch, a.seq_len, a.alphabet, a.vocab
    sym = torch.randint(0, A, (B, T - 1), generator=gen)
    counts = F.one_hot(sym, A).cumsum(1).gather(2, sym.unsqueeze(-1)).squeeze(-1)  # copies so far, itself included
    x = torch.cat([torch.full((B, 1), A), sym], 1)
    y = torch.cat([torch.full((B, 1), -1), counts.clamp(max=V) - 1], 1)
    return x, y


def recall_batch(a, gen):
    B, T, K, NV = a.batch, a.seq_len, a.keys, a.values
    x, y = torch.empty(B, T, dtype=torch.long), torch.full((B, T), -1)
    half = T // 2
    for b in range(B):
        vmap = torch.randint(0, NV, (K,), generator=gen).tolist()
        keys = torch.randint(0, K, (half,), generator=gen).tolist()
        shown = list(dict.fromkeys(keys))
        for i, kk in enumerate(keys):
            x[b, i] = kk * NV + vmap[kk]
        for i, j in enumerate(torch.randint(0, len(shown), (T - half,), generator=gen).tolist()):
            kk = shown[j]
            x[b, half + i], y[b, half + i] = K * NV + kk, vmap[kk]
    return x, y


# ---- task code (experiments/model/corpus.c): the same bytes, order and split --------
def corpus_paths(spec):
    """tg_corpus_load's files: FILE, FOLDER (recursively, path byte order), @LIST, or None: the .h files of
    `dpkg -L libc6-dev`, sorted."""
    def expand(p):
        if os.path.isfile(p):
            return [p]
        if not os.path.isdir(p):
            raise SystemExit(f"torch_attn_scale: corpus {p}: no such file or folder")
        out = []
        for name in sorted(os.listdir(p), key=lambda n: os.path.join(p, n).encode()):
            q = os.path.join(p, name)
            if not os.path.islink(q):
                out += expand(q)
        return out
    if spec is None:
        import subprocess
        lines = subprocess.run(["dpkg", "-L", "libc6-dev"], capture_output=True, text=True).stdout.split("\n")
        return sorted((l for l in lines if l.endswith(".h") and os.path.isfile(l)), key=str.encode)
    if spec.startswith("@"):
        out = []
        for l in open(spec[1:]):
            l = l.rstrip("\r\n")
            if l and not l.startswith("#"):
                out += expand(l)
        return out
    return expand(spec)


class Corpus:
    VAL = 64   # TG_CORPUS_VAL

    def __init__(self, spec, T):
        self.paths = corpus_paths(spec)
        data = b"".join(open(p, "rb").read() for p in self.paths)
        if not data:
            raise SystemExit("torch_attn_scale: the corpus is empty")
        self.bytes = torch.tensor(list(data), dtype=torch.long)
        n = len(data)
        self.n_train = n - n // 10
        self.T = T
        import hashlib
        self.sha256 = hashlib.sha256(data).hexdigest()
        counts = torch.zeros(256, 256, dtype=torch.float64)   # H(next | this) of the training part
        tr = self.bytes[:self.n_train]
        counts.index_put_((tr[:-1], tr[1:]), torch.ones(self.n_train - 1, dtype=torch.float64), accumulate=True)
        rows = counts.sum(1, keepdim=True)
        nz = counts > 0
        self.context_free = -(counts[nz] / (self.n_train - 1) * torch.log(counts[nz] / rows.expand_as(counts)[nz])).sum().item()

    def windows(self, starts):
        idx = torch.tensor(starts).unsqueeze(1) + torch.arange(self.T + 1)
        w = self.bytes[idx]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def batch(self, a, gen):
        return self.windows(torch.randint(0, self.n_train - self.T, (a.batch,), generator=gen).tolist())

    def validation(self):
        span = len(self.bytes) - self.n_train - self.T - 1
        return self.windows([self.n_train + span * i // (self.VAL - 1) for i in range(self.VAL)])


def context_free(a):
    """task_reference(): the best loss from the current token and its position alone."""
    if a.task == "code":
        return a.corpus.context_free
    if a.task == "recall":
        return math.log(a.values)
    T, A, V, p, total = a.seq_len, a.alphabet, a.vocab, 1.0 / a.alphabet, 0.0
    for i in range(1, T):
        n, probs = i - 1, [0.0] * V
        for j in range(n + 1):
            lc = math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
            probs[min(j + 1, V) - 1] += math.exp(lc + j * math.log(p) + (n - j) * math.log1p(-p))
        total -= sum(q * math.log(q) for q in probs if q > 0)
    return total / (T - 1)


def lr_at(step, a):
    """tg_lr_schedule()."""
    lr, lr_min = f32(a.lr), f32(a.lr_min)
    if step < a.warmup:
        return f32(lr * (step + 1) / a.warmup)
    if step >= a.steps:
        return lr_min
    pr = (step - a.warmup) / (a.steps - a.warmup)
    return f32(lr_min + (lr - lr_min) * 0.5 * (1 + math.cos(math.pi * pr)))


def optimizer(model, a):
    """Two or three groups: decayed (matrices, embeddings), not decayed (gains,
    biases, QK-norm gains), and the head scales at --scale-lr / --lr times the rate."""
    groups = {"decay": [], "keep": [], "scale": []}
    for name, p in model.named_parameters():
        base = name.rsplit(".", 1)[-1]
        if base == "hs":
            groups["scale"].append(p)
        elif base in ("tok", "pos", "wq", "wk", "wv", "wo", "w1", "w2", "wout"):
            groups["decay"].append(p)
        else:
            groups["keep"].append(p)
    mult = a.scale_lr / a.lr if a.scale_lr > 0 else 1.0
    pg = [{"params": groups["decay"], "weight_decay": a.weight_decay, "lr_mult": 1.0},
          {"params": groups["keep"], "weight_decay": 0.0, "lr_mult": 1.0}]
    if groups["scale"]:
        pg.append({"params": groups["scale"], "weight_decay": 0.0, "lr_mult": mult})
    if a.optim == "adam":
        return torch.optim.AdamW(pg, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    return torch.optim.SGD(pg, lr=a.lr, momentum=a.momentum)


def header(a, model, refs, uniform):
    """attn_scale's '# key=value' lines, as far as they apply, and its columns."""
    out = ["# torch attn_scale", "# framework=torch", f"# torch_version={torch.__version__}"]
    for k, v in vars(a).items():
        if k == "corpus" or (k in ("kv_heads", "window", "alibi", "softcap", "sinks", "attn_dropout") and not v) or \
                (k == "bias" and v == "none"):   # as attn_scale: named only when set
            continue
        if k in ("log", "data"):
            v = v or ""
        elif isinstance(v, float):
            v = "%.9g" % f32(v)
        out.append(f"# {k}={v}")
    out += ["# attn_scale_value=%.9g" % scale_float(a),
            "# n_params=%d" % sum(p.numel() for p in model.parameters()),
            "# ref_loss_optimal=%.6f" % (float("nan") if a.task == "code" else 0.0), "# ref_loss_context_free=%.6f" % refs,
            "# ref_entropy_uniform=%.6f" % uniform]
    if a.task == "code":
        out += [f"# corpus_sha256={a.corpus.sha256}", f"# corpus_files={len(a.corpus.paths)}",
                f"# corpus_bytes={len(a.corpus.bytes)}", f"# corpus_train_bytes={a.corpus.n_train}"]
    L, H = a.layers, a.heads
    heads = [f"l{l}_h{h}" for l in range(L) for h in range(H)]
    cols = ["step", "loss", "ent_mean"] + [f"ent_{x}" for x in heads] + [f"maxlogit_l{l}" for l in range(L)]
    cols += [f"sat_l{l}" for l in range(L)] + [f"nent_{x}" for x in heads] + ["grad_norm", "lr"]
    cols += [f"scale_{x}" for x in heads]
    if a.eval_every:
        cols += ["val_loss"]
    return "\n".join(out) + "\n" + "\t".join(cols) + "\n"


def row(step, loss, stats, uniform, gnorm, lr, val=None):
    ent = torch.cat([s[0] for s in stats]).tolist()
    f = [str(step), "%.6f" % loss, "%.6f" % (sum(f32(e) for e in ent) / len(ent))]
    f += ["%.6f" % f32(e) for e in ent]
    f += ["%.4f" % f32(s[1].max().item()) for s in stats]
    f += ["%.4f" % (sum(f32(x) for x in s[2].tolist()) / len(s[2])) for s in stats]
    f += ["%.6f" % (f32(e) / uniform) for e in ent]
    f += ["%.6g" % gnorm, "%.6g" % lr]
    f += ["%.6g" % f32(x) for s in stats for x in s[3].tolist()]
    if val is not None:
        f += ["nan" if math.isnan(val) else "%.6f" % val]
    return "\t".join(f) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=["hist", "recall", "code"], default="hist")
    ap.add_argument("--data", default=None, help="--task code: FILE, FOLDER or @LIST (default: libc6-dev's .h files)")
    ap.add_argument("--eval-every", type=int, default=0, help="--task code: the validation loss every N steps")
    for name, default in (("steps", 600), ("batch", 32), ("seq-len", 32), ("vocab", 64), ("d-model", 128),
                          ("heads", 4), ("d-head", 128), ("layers", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--kv-heads", type=int, default=0, help="key/value heads dividing --heads (0: --heads)")
    ap.add_argument("--window", type=int, default=0, help="each query sees its W latest keys (0: all earlier)")
    ap.add_argument("--bias", choices=["none", "table"], default="none")
    ap.add_argument("--alibi", type=int, nargs="?", const=1, default=0, choices=[0, 1])
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--sinks", type=int, nargs="?", const=1, default=0, choices=[0, 1])
    ap.add_argument("--attn-dropout", type=float, default=0.0)
    ap.add_argument("--scale", choices=SCALES, default="sqrt")
    ap.add_argument("--scale-mult", type=float, default=1.0)
    ap.add_argument("--learned-init", choices=["sqrt", "none"], default="sqrt")
    ap.add_argument("--learned-param", choices=["linear", "log"], default="linear")
    ap.add_argument("--scale-lr", type=float, default=0.0, help="0: --lr")
    ap.add_argument("--init", choices=["fanin", "gpt2", "lm"], default=None,
                    help="fanin (the default), gpt2, lm (the default of --task code), as attn_scale's")
    ap.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-min", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    for name, default in (("alphabet", 8), ("keys", 8), ("values", 6), ("seed", 1), ("threads", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--log", default=None)
    ap.add_argument("--log-every", type=int, default=10)
    a = ap.parse_args()
    if a.init is None:   # as attn_scale: a language model's recipe on code, fan-in elsewhere
        a.init = "lm" if a.task == "code" else "fanin"
    bad = [m for m, ok in (("--scale-mult must be finite and > 0", math.isfinite(a.scale_mult) and a.scale_mult > 0),
                           ("--warmup is longer than --steps", a.warmup <= a.steps),
                           ("--lr-min is above --lr", a.lr_min <= a.lr),
                           ("hist: alphabet needs 2 <= alphabet <= vocab-1", a.task != "hist" or 2 <= a.alphabet < a.vocab),
                           ("recall: keys*values+keys must fit the vocabulary and seq-len be even",
                            a.task != "recall" or (a.keys * a.values + a.keys <= a.vocab and a.seq_len % 2 == 0)),
                           ("--kv-heads must divide --heads", a.kv_heads >= 0 and (a.kv_heads == 0 or a.heads % a.kv_heads == 0)),
                           ("--window must be >= 0", a.window >= 0),
                           ("--softcap must be >= 0", a.softcap >= 0),
                           ("--attn-dropout must be in [0, 1)", 0 <= a.attn_dropout < 1),
                           ("sizes and --steps, --log-every must be positive",
                            min(a.steps, a.batch, a.seq_len, a.d_model, a.heads, a.d_head, a.layers, a.log_every) > 0))
           if not ok]
    if bad:
        ap.error(bad[0])
    if a.task == "code":
        a.vocab = 256
        a.corpus = Corpus(a.data, a.seq_len)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Model(a)
    gen = torch.Generator().manual_seed(a.seed + 0xDA7A)
    opt = optimizer(model, a)
    batch = hist_batch if a.task == "hist" else recall_batch if a.task == "recall" else a.corpus.batch
    uniform = sum(math.log(min(i + 1, a.window) if a.window else i + 1) for i in range(a.seq_len)) / a.seq_len
    refs = context_free(a)
    log = None
    if a.log:
        log = open(a.log + ".tmp", "w")
        log.write(header(a, model, refs, uniform))
        log.flush()
        os.replace(a.log + ".tmp", a.log)
    logged, t0 = [], time.perf_counter()
    params = list(model.parameters())
    for step in range(a.steps + 1):
        logging = step % a.log_every == 0 or step == a.steps
        val = None
        if a.eval_every:
            val = float("nan")
            if step % a.eval_every == 0 or step == a.steps:   # the model of this row: before its update
                with torch.no_grad():
                    vx, vy = a.corpus.validation()
                    val = sum(model(vx[i:i + 16], vy[i:i + 16]).item() for i in range(0, Corpus.VAL, 16)) / (Corpus.VAL // 16)
        x, y = batch(a, gen)
        stats = [] if logging else None
        model.training_step = True
        loss = model(x, y, stats)
        model.training_step = False
        lv, gnorm, lr = loss.item(), 0.0, 0.0
        if not math.isfinite(lv):
            print(f"torch_attn_scale: step {step}: non-finite loss {lv}", file=sys.stderr)
            return 3
        if step < a.steps:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                gnorm = torch.nn.utils.clip_grad_norm_(params, a.clip).item()
            else:
                gnorm = torch.norm(torch.stack([p.grad.norm() for p in params])).item()
            lr = lr_at(step, a)
            for g in opt.param_groups:
                g["lr"] = lr * g["lr_mult"]
            opt.step()
        if logging:
            if log:
                log.write(row(step, lv, stats, uniform, gnorm, lr, val))
                log.flush()
            ent = torch.cat([s[0] for s in stats])
            logged.append((lv, ent.mean().item()))
    n_total = a.steps // a.log_every + 1
    tail = logged[min(n_total - (n_total + 9) // 10, len(logged) - 1):]
    print("task=%s scale=%s d_head=%d seed=%d steps=%d final_loss=%.4f final_ent=%.4f uniform_ent=%.4f "
          "ref_context_free=%.4f seconds=%.1f framework=torch" %
          (a.task, a.scale, a.d_head, a.seed, a.steps, sum(t[0] for t in tail) / len(tail),
           sum(t[1] for t in tail) / len(tail), uniform, refs, time.perf_counter() - t0))
    if log:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
