#!/usr/bin/env python3
"""CodeGen's attention, ported: transformers' CodeGenAttention._attn of
src/transformers/models/codegen/modeling_codegen.py (docs/attn_check.md#ports-of-real-model-code names the commit):
query and key upcast to fp32 ("to avoid overflow"), scores = q kᵀ, the model's additive 4-D mask
(finfo(dtype).min where causal or padding hides a key) added, then divided by scale_attn = √d (here
1/scale: the kernel follows tapegrad's scale), softmax in fp32, the weights back to v's dtype, @ v.
A row that sees no key is min everywhere: every key alike (the mean of v). Conventions: causal
only, no per-head scale, empty rows the mean of v.

--mistake mask-top-left: the mask built for Tq = Tk and cut to the first Tq rows (top-left), as a
port that forgets the cache's offset would."""
import sys

import torch

from hf_masks import additive, allowed, mm, serve_port


def attn(query, key, value, attention_mask, scale_attn):
    query = query.to(torch.float32)
    key = key.to(torch.float32)
    attn_weights = torch.matmul(query, key.transpose(-1, -2))
    attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
    attn_weights = attn_weights / scale_attn
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = attn_weights.to(value.dtype)
    return mm(attn_weights, value)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, scale, causal, kv_len=None, **rest):
            B, H, Tq, _ = q.shape
            Tk = k.shape[2]
            if opt.mistake == "mask-top-left":
                ok = allowed(B, Tk, Tk, causal, kv_len)[:, :, :Tq]
            else:
                ok = allowed(B, Tq, Tk, causal, kv_len)
            return attn(q, k, v, additive(ok, q.dtype), 1.0 / scale)
        return attention

    return serve_port("codegen", ["mask-top-left"], attention_of, features=["dv", "tq_tk", "padding"],
                      conventions=["causal_only", "no_head_scale", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
