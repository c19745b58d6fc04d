#!/usr/bin/env python3
"""T5's attention, ported: transformers' T5Attention.forward of src/transformers/models/t5/modeling_t5.py
(docs/attn_check.md#ports-of-real-model-code names the commit): scores = q kᵀ with no scale at all (T5 folds 1/√d
into W_q's initialisation), the position bias (tapegrad's learned bias) plus the additive mask
(finfo(dtype).min where causal or padding hides a key) added, softmax in fp32 and back to the
scores' dtype, @ v. Encoder (not causal) and decoder (causal) alike. Conventions: the scale folded
into the initialisation, no per-head scale, empty rows the mean of v.

--mistake rsqrt-d: the port "fixes" T5 by dividing the scores by √d."""
import math
import sys

import torch

from hf_masks import additive, allowed, mm, serve_port


def attn(query, key, value, position_bias, mask, rsqrt_d):
    scores = mm(query, key.transpose(3, 2))
    if rsqrt_d:
        scores = scores / math.sqrt(query.shape[-1])
    position_bias = position_bias + mask
    scores = scores + position_bias.to(scores.dtype) if scores.dtype != torch.float32 else scores + position_bias
    attn_weights = torch.nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
    return mm(attn_weights, value)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, causal, kv_len=None, bias=None, **rest):
            B, H, Tq, _ = q.shape
            Tk = k.shape[2]
            mask = additive(allowed(B, Tq, Tk, causal, kv_len), q.dtype)
            position_bias = bias if bias is not None else torch.zeros(1, H, Tq, Tk, dtype=torch.float32)
            return attn(q, k, v, position_bias, mask, opt.mistake == "rsqrt-d")
        return attention

    return serve_port("t5", ["rsqrt-d"], attention_of, features=["dv", "tq_tk", "padding", "bias"],
                      conventions=["no_head_scale", "empty_mean", "scale_folded"])


if __name__ == "__main__":
    sys.exit(main())
