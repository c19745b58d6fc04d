#!/usr/bin/python3
"""PyTorch reference for bench_step: the same toy transformer (experiments/model/model.c),
the same step (forward, backward, grad-norm clip 1.0, AdamW), the same sizes and
output line. Run it with Debian's python3-torch (PyTorch 1.13, CPU):

    /usr/bin/python3 scripts/bench_torch.py --size seed --threads 2

glibc's malloc settings come from the environment (scripts/bench.sh runs it with
and without MALLOC_TRIM_THRESHOLD_/MALLOC_MMAP_THRESHOLD_ set)."""
import argparse
import math
import resource
import time

import torch
import torch.nn.functional as F

SIZES = {  # V T D H d_head L B, as in experiments/bench_step.c
    "small": (64, 32, 64, 4, 16, 1, 16),
    "seed": (64, 64, 128, 4, 128, 1, 32),
    "large": (256, 256, 256, 8, 32, 2, 16),
}


class Model(torch.nn.Module):
    """Pre-LN blocks, causal attention with scale 1/sqrt(dh), no q/k/v/o bias,
    GELU (tanh) MLP of width 4D, final LN, untied unembedding. Init as
    model.c's "fanin": embeddings N(0,1), a weight N(0, 1/fan_in), biases 0,
    gains 1."""

    def __init__(self, V, T, D, H, dh, L):
        super().__init__()
        self.H, self.dh = H, dh
        p = lambda *shape, std: torch.nn.Parameter(torch.randn(*shape) * std)
        self.tok = p(V, D, std=1.0)
        self.pos = p(T, D, std=1.0)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.ln1, m.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            m.wq, m.wk, m.wv = (p(D, H * dh, std=D ** -0.5) for _ in range(3))
            m.wo = p(H * dh, D, std=(H * dh) ** -0.5)
            m.w1, m.b1 = p(D, 4 * D, std=D ** -0.5), torch.nn.Parameter(torch.zeros(4 * D))
            m.w2, m.b2 = p(4 * D, D, std=(4 * D) ** -0.5), torch.nn.Parameter(torch.zeros(D))
            self.layers.append(m)
        self.lnf = torch.nn.LayerNorm(D)
        self.wout = p(D, V, std=D ** -0.5)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, tokens, targets):
        B, T = tokens.shape
        H, dh = self.H, self.dh
        x = self.tok[tokens] + self.pos[:T]
        for m in self.layers:
            h = m.ln1(x)
            q, k, v = ((h @ w).view(B, T, H, dh).transpose(1, 2) for w in (m.wq, m.wk, m.wv))
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))
            a = s.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1) @ v
            x = x + a.transpose(1, 2).reshape(B, T, H * dh) @ m.wo
            x = x + F.gelu(m.ln2(x) @ m.w1 + m.b1, approximate="tanh") @ m.w2 + m.b2
        logits = self.lnf(x) @ self.wout
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def forward_flops(V, T, D, H, dh, L, B):
    """bench_step.c's count: matrix products of the forward, attention over the full T×T."""
    BT, HD = B * T, H * dh
    layer = 2 * BT * D * HD * 4 + 2 * BT * D * 4 * D * 2 + 2 * B * H * T * T * dh * 2
    return L * layer + 2 * BT * D * V


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=SIZES, default="seed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=0)
    ap.add_argument("--label", default="torch", help="the attn= field of the output line")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    V, T, D, H, dh, L, B = SIZES[a.size]
    T = a.seq_len or T
    torch.manual_seed(1)
    model = Model(V, T, D, H, dh, L)
    # AdamW as tapegrad's bench: betas (0.9, 0.95), eps 1e-8, no weight decay
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    ms = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s >= a.warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
    ms.sort()
    n = len(ms)
    med = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
    gflop = 3 * forward_flops(V, T, D, H, dh, L, B) / 1e9
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"size={a.size} threads={a.threads} attn={a.label} T={T} median_ms={med:.3f} min_ms={ms[0]:.3f} "
          f"max_ms={ms[-1]:.3f} gflops={gflop / (med / 1e3):.1f} peak_rss_mb={rss:.1f} allocs_per_step=nan "
          f"loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
