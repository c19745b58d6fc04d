#!/usr/bin/env python3
"""Llama's attention, ported: transformers' eager_attention_forward of
src/transformers/models/llama/modeling_llama.py (docs/attn_check.md#ports-of-real-model-code names the commit): the
key/value heads repeated to the query heads (repeat_kv), scores = q kᵀ · scaling, the model's
additive finfo.min mask added, softmax in float32, weights @ v. The model passes its own
scaling = head_dim**-0.5 as an argument: here tapegrad's `scale` takes its place, so the kernel
follows the scale. Conventions: causal only (a decoder), no per-head scale, empty rows the mean
of v (the additive finfo.min mask). Dropout is torch's own random one: not declared.

--mistake forget-scaling: the port inlines the function and drops `* scaling` (the seed's bug)."""
import argparse
import sys

import torch

from hf_masks import additive, allowed, tapegrad_exec as tx


def repeat_kv(x, n_rep):
    """[B, Hkv, T, d] -> [B, Hkv·n_rep, T, d], each kv head n_rep times in a row (repeat_interleave)."""
    B, Hkv, T, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(B, Hkv, n_rep, T, d).reshape(B, Hkv * n_rep, T, d)


def eager_attention_forward(query, key, value, attention_mask, scaling, n_rep, forget_scaling=False):
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3))
    if not forget_scaling:
        attn_weights = attn_weights * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value_states)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mistake", choices=["forget-scaling"])
    opt = ap.parse_args()

    def attention(q, k, v, *, scale, causal, kv_len=None, **rest):
        B, H, Tq, _ = q.shape
        mask = additive(allowed(B, Tq, k.shape[2], causal, kv_len))
        return eager_attention_forward(q, k, v, mask, scale, H // k.shape[1], opt.mistake == "forget-scaling")

    torch.set_num_threads(1)
    return tx.serve_torch(attention, name="llama" + ("-" + opt.mistake if opt.mistake else ""), layout="bhtd",
                          features=["dv", "gqa", "tq_tk", "padding"],
                          conventions=["causal_only", "no_head_scale", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
