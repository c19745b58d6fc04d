#!/usr/bin/env python3
"""OPT's attention, ported: transformers' OPTAttention.forward of src/transformers/models/opt/modeling_opt.py
(docs/attn_check.md#ports-of-real-model-code names the commit): q scaled first (q_proj(x) * scaling, here tapegrad's
scale, rounded to the dtype), scores = bmm(q, kᵀ), the decoder's mask added (the causal and the
padding masks summed: min + min = −inf where both hide a key), then clamped from below at
finfo(dtype).min (torch.max): every hidden key is min again, so a row that sees no key weighs every
key alike (the mean of v). Softmax (in fp32 for fp16), @ v. Conventions: causal only, no per-head
scale, empty rows the mean of v.

--mistake scale-qk: the port scales k by `scaling` too (the scale applied twice)."""
import sys

import torch

from hf_masks import additive, allowed, mm, serve_port, softmax_in


def attn(query, key, value, attention_mask, scaling, scale_qk):
    query = (query.float() * scaling).to(query.dtype)
    if scale_qk:
        key = (key.float() * scaling).to(key.dtype)
    attn_weights = mm(query, key.transpose(-1, -2))
    attn_weights = attn_weights + attention_mask
    attn_weights = torch.max(attn_weights, torch.tensor(torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype))
    attn_weights = softmax_in(attn_weights)   # fp16: softmax(dtype=float32).to(fp16); fp32, bf16: in their dtype
    return mm(attn_weights, value)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, scale, causal, kv_len=None, **rest):
            B, H, Tq, _ = q.shape
            Tk = k.shape[2]
            causal_add = additive(allowed(B, Tq, Tk, causal), q.dtype)   # _make_causal_mask
            pad_add = additive(allowed(B, Tq, Tk, False, kv_len), q.dtype) if kv_len is not None else 0   # _expand_mask
            return attn(q, k, v, pad_add + causal_add, scale, opt.mistake == "scale-qk")
        return attention

    return serve_port("opt", ["scale-qk"], attention_of, features=["dv", "tq_tk", "padding"],
                      conventions=["causal_only", "no_head_scale", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
