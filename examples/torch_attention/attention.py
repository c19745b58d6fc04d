#!/usr/bin/env python3
"""An attention kernel in PyTorch, written the way a model team writes one (einsum scores, a
boolean mask for causality and a sliding window, grouped key/value heads repeated to the query
heads, softmax, einsum with V), served to tapegrad over the exec protocol:

    attn_check exec:'/usr/bin/python3 examples/torch_attention/attention.py'
    attn_scale --attn exec:'/usr/bin/python3 examples/torch_attention/attention.py' --log right.tsv

--forget-scale is the seed's bug: the scores are not multiplied by `scale` (1/sqrt(d_head) as
tapegrad passes it), so at d_head = 128 every head's softmax saturates on one key.
--threads N: torch's intra-op threads (default 1: tapegrad's own threads are on the other cores).
Needs tapegrad_exec.py on PYTHONPATH (installed as share/tapegrad/python; scripts/python in the
source tree) and PyTorch (Debian: python3-torch, for /usr/bin/python3)."""
import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(here, "..", "..", "scripts", "python"), os.path.join(here, "..", "..", "share", "tapegrad", "python")):
    if os.path.exists(os.path.join(p, "tapegrad_exec.py")) and p not in sys.path:
        sys.path.append(p)   # PYTHONPATH, when set, comes first
import tapegrad_exec as tx  # noqa: E402


def visible(Tq, Tk, causal, window_left, window_right):
    """[Tq, Tk] bool: which keys each query may see. Query i sits at key position i + Tk - Tq
    (aligned at the end, as with a KV cache); the window counts keys left and right of it."""
    pos = torch.arange(Tq).unsqueeze(1) + (Tk - Tq)
    key = torch.arange(Tk).unsqueeze(0)
    ok = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        ok &= key <= pos
    if window_left >= 0:
        ok &= key >= pos - window_left
    if window_right >= 0:
        ok &= key <= pos + window_right
    return ok


def make_attention(forget_scale):
    def attention(q, k, v, *, scale, causal, window_left=-1, window_right=-1, head_scale=None, **rest):
        # q [B, H, Tq, d], k [B, Hkv, Tk, d], v [B, Hkv, Tk, dv]
        H, Hkv = q.shape[1], k.shape[1]
        if Hkv != H:   # grouped heads: each key/value head serves H / Hkv query heads in a row
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        scores = torch.einsum("bhid,bhjd->bhij", q, k)
        if not forget_scale:
            scores = scores * scale
        if head_scale is not None:   # a learned multiplier per head (attn_scale's learned modes)
            scores = scores * head_scale.view(1, H, 1, 1)
        ok = visible(q.shape[2], k.shape[2], causal, window_left, window_right)
        scores = scores.masked_fill(~ok, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        return torch.einsum("bhij,bhjd->bhid", p, v)
    return attention


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--forget-scale", action="store_true", help="the seed's bug: scores not multiplied by scale")
    ap.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (default 1)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    name = "torch einsum" + (" (scale forgotten)" if a.forget_scale else "")
    sys.exit(tx.serve_torch(make_attention(a.forget_scale), name=name, features=["dv", "gqa", "window"], layout="bhtd"))
