#!/usr/bin/env python3
"""Phi's attention, ported: transformers' PhiAttention.forward of src/transformers/models/phi/modeling_phi.py
(docs/attn_check.md#ports-of-real-model-code names the commit): key/value heads repeated (repeat_kv), query and key
upcast to fp32 ("required by Phi-2 to avoid overflow"), scores = q kᵀ / math.sqrt(head_dim) (its own
scale: head_dim of q), the additive mask (finfo(dtype).min) added, softmax in fp32, the weights back
to v's dtype, @ v. Conventions: causal only, no per-head scale, its own 1/√d, empty rows the mean of v.

--mistake hidden-size: the port divides by √hidden_size (H · head_dim), the model's width.
--mistake view-heads: q_proj's output viewed as (bsz, num_heads, q_len, head_dim) where the model views
(bsz, q_len, num_heads, head_dim) and transposes: heads and positions swapped."""
import math
import sys

import torch

from hf_masks import additive, allowed, mm, serve_port
from llama import repeat_kv


def attn(query, key, value, attention_mask, n_rep, hidden_size_mistake):
    key = repeat_kv(key, n_rep)
    value = repeat_kv(value, n_rep)
    head_dim = query.shape[-1]
    div = math.sqrt(head_dim * query.shape[1]) if hidden_size_mistake else math.sqrt(head_dim)
    attn_weights = torch.matmul(query.to(torch.float32), key.to(torch.float32).transpose(2, 3)) / div
    attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(value.dtype)
    return mm(attn_weights, value)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, causal, kv_len=None, **rest):
            B, H, Tq, d = q.shape
            if opt.mistake == "view-heads":   # q_proj(x) is [B, Tq, H·d]: viewed heads first
                q = q.transpose(1, 2).reshape(B, Tq * H * d).view(B, H, Tq, d)
            mask = additive(allowed(B, Tq, k.shape[2], causal, kv_len), q.dtype)
            return attn(q, k, v, mask, H // k.shape[1], opt.mistake == "hidden-size")
        return attention

    return serve_port("phi", ["hidden-size", "view-heads"], attention_of, features=["dv", "gqa", "tq_tk", "padding"],
                      conventions=["causal_only", "no_head_scale", "scale_rsqrt_d", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
