/* tg_attention: multi-head scaled dot-product attention.
 *
 * Shapes: q, k [B, T, H, d]; v [B, T, H, dv] (dv may differ from d); out
 * [B, T, H, dv]. This is the layout of x·W reshaped from [B, T, H·d], so heads
 * are read as strided [T, d] matrices (leading dimension H·d): no transposes.
 * Per batch b and head h, with s = scale · (head_scale ? head_scale[h] : 1):
 *   S = Q Kᵀ [T,T],  P = softmax(s·S) by rows (causal: keys j > i get weight 0),  O = P V.
 * `scale` is any finite float (1/sqrt(d) usually; 1 or 1/d work the same way).
 * head_scale is NULL or a [H] tensor, e.g. a learnable per-head scale.
 * Gradient: dV = Pᵀ dO, dL = P ⊙ (dO Vᵀ − rowsum(dO Vᵀ ⊙ P)), dQ = s·dL K,
 *   dK = s·dLᵀ Q, d head_scale[h] = scale · Σ_{b,i,j} dL ⊙ S. */
#ifndef TG_OP_ATTENTION_H
#define TG_OP_ATTENTION_H
#include "tg_core.h"

/* Attention health, per head, filled by the forward when passed non-NULL.
 * The caller owns the arrays (length H, H equal to the tensors' H; an array
 * left NULL is skipped).
 *   entropy[h]    mean over batch and query rows of −Σ_j p_j ln p_j, in nats
 *                 (masked keys excluded); compare with tg_attn_uniform_entropy.
 *   max_logit[h]  the largest s·S over the head's unmasked entries.
 *   saturation[h] share of rows whose largest weight is > 0.99. */
typedef struct tg_attn_stats {
    int H;
    float *entropy;
    float *max_logit;
    float *saturation;
} tg_attn_stats;

tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats);

/* Any attention op with tg_attention's signature and contract: tg_attention,
 * tg_flash_attention, or a researcher's own kernel (a plugin, tg_attn_plugin.h of
 * the training kit). `stats` may be NULL; a kernel that does not fill it must
 * leave it alone. The toy model calls one of these in every layer. */
typedef tg_tensor *(*tg_attention_fn)(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                                      float scale, int causal, tg_attn_stats *stats);

/* The entropy of uniform attention: mean over query rows of ln(visible keys),
 * i.e. ln T, or the mean over i of ln(i + 1) when causal. */
double tg_attn_uniform_entropy(int T, int causal);

/* The weights P [B, H, T, T] (masked entries 0) that the tg_attention call
 * which made `out` saved on ctx's tape; NULL when that call recorded no node
 * (no input needed a gradient, or grad was disabled). Valid until the reset. */
const float *tg_attention_probs(const tg_ctx *ctx, const tg_tensor *out);

#endif
