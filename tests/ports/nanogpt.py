#!/usr/bin/env python3
"""nanoGPT's manual attention, ported: CausalSelfAttention.forward of model.py (the path without
flash): att = (q @ kᵀ) · (1/sqrt(k.size(-1))), masked_fill of the causal tril buffer with -inf,
softmax, @ v. Its scale is its own, whatever is passed; it is causal only and has no per-head
scale. Dropout is torch's random one: not declared."""
import math
import sys

import torch

from hf_masks import tapegrad_exec as tx


def attend(q, k, v):
    T = q.size(-2)
    bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
    att = torch.nn.functional.softmax(att, dim=-1)
    return att @ v


def attention(q, k, v, **rest):
    return attend(q, k, v)


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(tx.serve_torch(attention, name="nanogpt", layout="bhtd", features=["dv"],
                            conventions=["causal_only", "no_head_scale", "scale_rsqrt_d"]))
