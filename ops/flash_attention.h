/* tg_flash_attention: the same function as tg_attention, computed in tiles.
 *
 * Shapes: q, k [B, T, H, d]; v [B, T, H, dv]; out [B, T, H, dv]; head_scale
 * NULL or [H]; s = scale · (head_scale ? head_scale[h] : 1). Per batch and head:
 *   O = softmax(s · Q Kᵀ + causal mask) V,
 * but the T×T scores never exist: query tiles meet key tiles one at a time with
 * an online softmax (running max m and sum ℓ per row, earlier partial outputs
 * rescaled by e^{m_old − m_new} when m grows). The forward saves only
 * lse = m + ln ℓ per row; backward rebuilds each tile's weights as
 * P = e^{s·S − lse} (FlashAttention-2).
 * Gradient: D = rowsum(dO ⊙ O), dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ − D), dQ = s·dS K,
 *   dK = s·dSᵀ Q, d head_scale[h] = scale · Σ dS ⊙ Q Kᵀ.
 * Stats (tg_attn_stats, as tg_attention's) come online in the same pass: a
 * row's entropy is ln ℓ − Σ_j e^{x_j − m}(x_j − m) / ℓ over logits x, its top
 * weight is 1/ℓ, its largest logit m. Threads: OpenMP over batch × heads. */
#ifndef TG_OP_FLASH_ATTENTION_H
#define TG_OP_FLASH_ATTENTION_H
#include "attention.h"

/* Tile sizes, query rows × keys: a BQ×BK tile of logits and its weights stay in
 * cache with the K and V rows they came from. Measured flat (within 5%) from
 * 64×64 to 256×256 at T = 64 to 4096; 64×256 was the best of those. */
#define TG_FLASH_BQ 64
#define TG_FLASH_BK 256

tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                              float scale, int causal, tg_attn_stats *stats);

/* The per-row log-sum-exp [B, H, T] that the call which made `out` saved; NULL
 * when it recorded no node. Valid until the reset. */
const float *tg_flash_attention_lse(const tg_ctx *ctx, const tg_tensor *out);

#endif
