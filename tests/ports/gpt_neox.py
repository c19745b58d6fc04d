#!/usr/bin/env python3
"""GPT-NeoX's (Pythia's) attention, ported: transformers' GPTNeoXAttention._attn of
src/transformers/models/gpt_neox/modeling_gpt_neox.py (docs/attn_check.md#ports-of-real-model-code names the commit):
scores = baddbmm(q, kᵀ, alpha = 1/norm_factor) in the input's dtype (here alpha = tapegrad's scale),
the causal mask from its buffer cut bottom-right ([Tk − Tq : Tk]) applied by where(causal, s,
finfo(dtype).min), then the padding mask added as finfo(dtype).min: a key both hide is min + min =
−inf, so a row that sees no key weighs its causal prefix alike (not the mean of every v). Softmax in
the input's dtype, @ v. Conventions: causal only, no per-head scale, empty rows the mean of the
causal prefix.

--mistake causal-top-left: the causal buffer cut [:Tq] (top-left), as before the cache's offset."""
import sys

import torch

from hf_masks import additive, allowed, mm, serve_port, softmax_in


def attn(query, key, value, causal_mask, attention_mask, alpha):
    attn_scores = (mm(query, key.transpose(-1, -2)).float() * alpha).to(query.dtype)   # one rounding, as baddbmm
    mask_value = torch.tensor(torch.finfo(attn_scores.dtype).min, dtype=attn_scores.dtype)
    attn_scores = torch.where(causal_mask, attn_scores, mask_value)
    if attention_mask is not None:
        attn_scores = attn_scores + attention_mask
    attn_weights = softmax_in(attn_scores)
    attn_weights = attn_weights.to(value.dtype)
    return mm(attn_weights, value)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, scale, causal, kv_len=None, **rest):
            B, H, Tq, _ = q.shape
            Tk = k.shape[2]
            tri = torch.tril(torch.ones(Tk, Tk, dtype=torch.bool)).view(1, 1, Tk, Tk)   # the model's "bias" buffer
            causal_mask = tri[:, :, :Tq, :Tk] if opt.mistake == "causal-top-left" else tri[:, :, Tk - Tq:Tk, :Tk]
            pad = None
            if kv_len is not None:   # [B, 1, 1, Tk]: (1 - mask) * finfo.min, as the model's get_extended_attention_mask
                pad = additive(allowed(B, 1, Tk, False, kv_len), q.dtype)
            return attn(q, k, v, causal_mask, pad, scale)
        return attention

    return serve_port("gpt-neox", ["causal-top-left"], attention_of, features=["dv", "tq_tk", "padding"],
                      conventions=["causal_only", "no_head_scale", "empty_prefix"])


if __name__ == "__main__":
    sys.exit(main())
