#!/usr/bin/env python3
"""PyTorch's own attention as an exec kernel: the reference a kernel of one's own is compared with.

torch.nn.functional.scaled_dot_product_attention (PyTorch 2.0 on; 1.13, Debian 12's, has it as
F._scaled_dot_product_attention, which always divides by sqrt(d) itself and takes no scale, so
the scale tapegrad passes is given by multiplying q by scale * sqrt(d) first). The causal mask and
the window go in as a boolean mask aligned at the end (tapegrad's contract); grouped key/value
heads are repeated to the query heads. attn_check must find it conforming:

    attn_check exec:'/usr/bin/python3 examples/torch_attention/reference.py'
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from attention import tx, visible  # noqa: E402  (the same mask; the module finds tapegrad_exec)


def sdpa(q, k, v, mask, scale):
    if hasattr(F, "scaled_dot_product_attention"):   # PyTorch >= 2.1 takes the scale
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    out, _ = F._scaled_dot_product_attention(q * (scale * math.sqrt(q.shape[-1])), k, v, mask, 0.0, False, False)
    return out


def attention(q, k, v, *, scale, causal, window_left=-1, window_right=-1, head_scale=None, **rest):
    H, Hkv = q.shape[1], k.shape[1]
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    if head_scale is not None:   # per-head multipliers: folded into q, as the scale is
        q = q * head_scale.view(1, H, 1, 1)
    mask = visible(q.shape[2], k.shape[2], causal, window_left, window_right)
    return sdpa(q, k, v, mask, scale)


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(tx.serve_torch(attention, name="torch sdpa (reference)", features=["dv", "gqa", "window"], layout="bhtd"))
