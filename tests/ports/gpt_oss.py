#!/usr/bin/env python3
"""GPT-OSS's attention, ported: the eager_attention_forward of
src/transformers/models/gpt_oss/modeling_gpt_oss.py: repeat_kv, scores · scaling, the additive
mask, then each head's sink logit appended as one more column, the row's max subtracted, softmax,
and the sink's column dropped (the sink takes its share of the denominator only). Sliding-window
layers mask as Mistral's. The sinks are a parameter of every layer: there is no call without them
(tapegrad sends -inf sinks for one). Conventions: causal only, no per-head scale, causal left
windows only, sinks always on, and empty rows the mean of v: with -inf sinks a row of finfo.min
logits weighs its keys alike (with a finite sink such a row gives 0; tapegrad refuses both)."""
import sys

import torch

from hf_masks import additive, allowed, window_of, tapegrad_exec as tx
from llama import repeat_kv


def eager_attention_forward(query, key, value, attention_mask, scaling, n_rep, sinks):
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    B, H, Tq, _ = query.shape
    s = sinks.reshape(1, -1, 1, 1).expand(B, -1, Tq, -1)
    combined = torch.cat([attn_weights, s], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.nn.functional.softmax(combined, dim=-1, dtype=combined.dtype)
    return torch.matmul(probs[..., :-1], value_states)


def attention(q, k, v, *, scale, causal, sinks, window_left=-1, window_right=-1, kv_len=None, **rest):
    B, H, Tq, _ = q.shape
    ok = allowed(B, Tq, k.shape[2], causal, kv_len, window_of(window_left, window_right, causal))
    return eager_attention_forward(q, k, v, additive(ok), scale, H // k.shape[1], sinks)


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(tx.serve_torch(attention, name="gpt-oss", layout="bhtd",
                            features=["dv", "gqa", "tq_tk", "padding", "window", "sinks"],
                            conventions=["causal_only", "no_head_scale", "window_causal", "sinks_always", "empty_mean"]))
