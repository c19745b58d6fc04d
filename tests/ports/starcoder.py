#!/usr/bin/env python3
"""StarCoder's attention, ported: transformers' GPTBigCodeAttention._attn (multi-query) with
upcast_masked_softmax, of src/transformers/models/gpt_bigcode/modeling_gpt_bigcode.py
(docs/attn_check.md#ports-of-real-model-code names the commit). One key/value head shared by every
query head; scale_factor = scale / (layer_idx + 1) in the product (baddbmm's alpha), and in the
softmax, upcast to fp32, x * unscale with unscale = layer_idx + 1 (so fp16's range holds the
products of deep layers; in fp32 there is no upcast and unscale is 1), then where(mask, x, finfo(fp32).min): one boolean mask of causal and
padding, so an empty row weighs every key alike (the mean of v). The weights go back to the input's
dtype before the product with v. Conventions: causal only, no per-head scale, one kv head, empty
rows the mean of v. --precision bf16 / fp16: q, k, v arrive in it and the products run in it, as
the model runs under autocast or .half().

--mistake drop-unscale: the fp32 multiply by unscale dropped (the multiplier is then 1/(layer+1):
right at layer 0 only). --mistake forget-scaling: scale_attn_weights off (the seed's bug)."""
import sys

import torch

from hf_masks import allowed, mm, serve_port


def upcast_masked_softmax(x, mask, mask_value, scale, softmax_dtype, drop_unscale):
    input_dtype = x.dtype
    x = x.to(softmax_dtype)
    if not drop_unscale:
        x = x * scale
    x = torch.where(mask, x, mask_value)
    return torch.nn.functional.softmax(x, dim=-1).to(input_dtype)


def attn(query, key, value, mask, scale, layer_idx, mistake):
    """query [B, H, Tq, d], key and value [B, 1, Tk, d]: the multi-query layout, heads folded
    into the query length as GPTBigCode does ([B, Tq·H, d] against [B, d, Tk])."""
    B, H, Tq, d = query.shape
    Tk = key.shape[2]
    unscale = layer_idx + 1 if query.dtype != torch.float32 else 1   # only when the softmax upcasts
    scale_factor = (1.0 if mistake == "forget-scaling" else scale) / unscale
    q = query.transpose(1, 2).reshape(B, Tq * H, d)
    k = key[:, 0].transpose(1, 2)   # [B, d, Tk]
    w = (mm(q, k).float() * scale_factor).to(q.dtype)   # baddbmm(empty, q, k, beta=0, alpha=scale_factor): one rounding
    w = w.view(B, Tq, H, Tk)
    m = mask.view(B, Tq, 1, Tk)
    w = upcast_masked_softmax(w, m, torch.tensor(torch.finfo(torch.float32).min), unscale, torch.float32,
                              mistake == "drop-unscale")
    out = mm(w.reshape(B, Tq * H, Tk), value[:, 0])   # torch.bmm: [B, Tq·H, dv]
    return out.view(B, Tq, H, -1).transpose(1, 2)


def main():
    def attention_of(opt):
        def attention(q, k, v, *, scale, causal, layer=0, kv_len=None, **rest):
            B, H, Tq, _ = q.shape
            ok = allowed(B, Tq, k.shape[2], causal, kv_len)[:, 0]
            return attn(q, k, v, ok, scale, layer, opt.mistake)
        return attention

    return serve_port("starcoder", ["drop-unscale", "forget-scaling"], attention_of, features=["dv", "gqa", "tq_tk", "padding"],
                      conventions=["causal_only", "no_head_scale", "mqa_only", "empty_mean"])


if __name__ == "__main__":
    sys.exit(main())
