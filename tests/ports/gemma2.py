#!/usr/bin/env python3
"""Gemma 2's attention, ported: the eager_attention_forward of
src/transformers/models/gemma2/modeling_gemma2.py: repeat_kv, scores · scaling (the model's
query_pre_attn_scalar**-0.5, here tapegrad's `scale`), then the soft-cap (scores / cap, tanh,
· cap; attn_logit_softcapping, here tapegrad's `softcap`), *then* the additive mask, float32
softmax. Sliding-window layers mask as Mistral's. Conventions: causal only, no per-head scale,
causal left windows only, empty rows the mean of v.

--mistake mask-before-cap: the port adds the mask before the cap, so tanh turns the mask's
finfo.min into -cap and every hidden key keeps e^-cap of a seen one's weight."""
import argparse
import sys

import torch

from hf_masks import additive, allowed, window_of, tapegrad_exec as tx
from llama import repeat_kv


def eager_attention_forward(query, key, value, attention_mask, scaling, n_rep, softcap=None, mask_first=False):
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if mask_first and attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if not mask_first and attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value_states)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mistake", choices=["mask-before-cap"])
    opt = ap.parse_args()

    def attention(q, k, v, *, scale, causal, softcap=0.0, window_left=-1, window_right=-1, kv_len=None, **rest):
        B, H, Tq, _ = q.shape
        ok = allowed(B, Tq, k.shape[2], causal, kv_len, window_of(window_left, window_right, causal))
        return eager_attention_forward(q, k, v, additive(ok), scale, H // k.shape[1], softcap if softcap > 0 else None,
                                       opt.mistake == "mask-before-cap")

    torch.set_num_threads(1)
    return tx.serve_torch(attention, name="gemma2" + ("-" + opt.mistake if opt.mistake else ""), layout="bhtd",
                          features=["dv", "gqa", "tq_tk", "padding", "window", "softcap"],
                          conventions=["causal_only", "no_head_scale", "window_causal", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
