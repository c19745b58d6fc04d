#!/usr/bin/env python3
"""BLOOM's attention, ported: BloomAttention of src/transformers/models/bloom/modeling_bloom.py.
ALiBi as build_alibi_tensor makes it: slope_h · position of the key (the cumulative sum of the
attention mask, minus 1, times the mask: j for the first kv_len keys), a one-sided ramp added to
the scores by baddbmm(alibi, q, kᵀ, beta=1, alpha=inv_norm_factor) with the model's own
inv_norm_factor = 1/sqrt(head_dim); then masked_fill(mask, finfo.min), float32 softmax, @ v.
The slopes are tapegrad's `alibi` (the model's get_slopes gives them per head count). The ramp
slope·j is -slope·|j - i| plus a constant of the row only where j <= i: ALiBi holds under the
causal mask alone. Conventions: causal only, no per-head scale, its own scale 1/sqrt(d),
ALiBi only under the causal mask, empty rows the mean of v (finfo.min filled)."""
import math
import sys

import torch

from hf_masks import allowed, tapegrad_exec as tx


def bloom_attention(query, key, value, alibi, inv_norm_factor, hidden_mask):
    # query, key, value [B, H, T, d]; alibi [B·H, 1, Tk]; hidden_mask [B, 1, Tq, Tk] True = masked
    B, H, Tq, d = query.shape
    Tk = key.shape[2]
    q = query.reshape(B * H, Tq, d)
    k_t = key.reshape(B * H, Tk, d).transpose(1, 2)
    scores = alibi.baddbmm(batch1=q, batch2=k_t, beta=1.0, alpha=inv_norm_factor).view(B, H, Tq, Tk)
    scores = scores.masked_fill(hidden_mask, torch.finfo(scores.dtype).min)
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(probs, value)


def build_alibi(slopes, attention_mask):
    """[B·H, 1, Tk]: slope_h · ((cumsum(mask) - 1) · mask)."""
    arange = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[None, :, None] * arange
    B, Tk = attention_mask.shape
    return alibi.reshape(B * slopes.shape[0], 1, Tk)


def attention(q, k, v, *, causal, alibi=None, kv_len=None, **rest):
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    keep = torch.ones(B, Tk) if kv_len is None else (torch.arange(Tk)[None, :] < kv_len[:, None]).to(torch.float32)
    slopes = alibi if alibi is not None else torch.zeros(H)
    ok = allowed(B, Tq, Tk, causal, kv_len)
    return bloom_attention(q, k, v, build_alibi(slopes, keep), 1.0 / math.sqrt(d), ~ok)


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(tx.serve_torch(attention, name="bloom", layout="bhtd", features=["dv", "padding", "alibi"],
                            conventions=["causal_only", "no_head_scale", "scale_rsqrt_d", "alibi_causal", "empty_mean"]))
