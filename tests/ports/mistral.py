#!/usr/bin/env python3
"""Mistral's (and Qwen2's) attention, ported: the eager_attention_forward of
src/transformers/models/mistral/modeling_mistral.py is Llama's (repeat_kv, · scaling, the additive
mask, float32 softmax); what differs is the mask: a sliding window of W keys, the key itself and
the W - 1 before it (kv_idx > q_idx - W), under the causal mask. Conventions: causal only, no
per-head scale, causal left windows only (the model has no other), empty rows the mean of v."""
import sys

import torch

from hf_masks import additive, allowed, window_of, tapegrad_exec as tx
from llama import eager_attention_forward


def attention(q, k, v, *, scale, causal, window_left=-1, window_right=-1, kv_len=None, **rest):
    B, H, Tq, _ = q.shape
    ok = allowed(B, Tq, k.shape[2], causal, kv_len, window_of(window_left, window_right, causal))
    return eager_attention_forward(q, k, v, additive(ok), scale, H // k.shape[1])


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(tx.serve_torch(attention, name="mistral", layout="bhtd",
                            features=["dv", "gqa", "tq_tk", "padding", "window"],
                            conventions=["causal_only", "no_head_scale", "window_causal", "empty_mean"]))
