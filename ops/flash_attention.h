/* tg_flash_attend / tg_flash_attention: the same function as tg_attend (the
 * contract of tg_attn_args, attn_args.h: grouped heads, alignment, windows,
 * padding, what changes the logits), computed in tiles with an online softmax:
 * the weights are recomputed in the backward, never kept. The `online` kernel
 * (attn_kernel.h); `fused` before 0.20.
 *
 * Per batch row and query head: O = softmax(s · Q Kᵀ over the visible keys) V,
 * but the Tq×Tk scores never exist: query tiles meet key tiles one at a time
 * with an online softmax (running max m and sum ℓ per row, earlier partial
 * outputs rescaled by e^{m_old − m_new} when m grows). Key tiles that no row of
 * a query tile sees (causal mask, window, padding) are skipped, so a window of
 * W keys costs in proportion to Tq·W, not Tq·Tk. The forward saves per row the
 * maximum m and ln ℓ apart (and lse = m + ln ℓ for callers); backward rebuilds
 * each tile's weights as P = e^{(s·S − m) − ln ℓ}: s·S − m is what the forward
 * exponentiated, so P stays exact to float32 where the logits are huge (lse
 * rounded to float at 10⁴ would be off by 10⁻³ there).
 * Under a context precision (tg_ctx_set_precision, 0.22) every product reads its operands rounded
 * to it: q, k, v, dO, the unnormalised weights and s·dS; ℓ, softmax and outputs stay float32.
 * Gradient: D = rowsum(dO ⊙ O), dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ − D), dQ = s·dS K,
 *   dK = s·dSᵀ Q, d head_scale[h] = scale · Σ dS ⊙ Q Kᵀ (dK, dV summed over the
 *   query heads of a key/value head, in order, by the one thread that owns it).
 *   D from O and dP from the product are one sum in two orders: in a row whose
 *   true dS is 0 they leave ~1e-6 of its size. A row whose span holds one key
 *   (a window (0, 0), a first causal row, kv_len 1), with no sink, takes D = dP
 *   and is exactly 0, as tg_attend's; a row whose bias masks all but one of
 *   several keys keeps the ~1e-6 (found only in the tile pass, after D is used).
 * Stats (tg_attn_stats, as tg_attend's) come online in the same pass: a row's
 * entropy is ln ℓ − Σ_j e^{x_j − m}(x_j − m) / ℓ over logits x, its top weight
 * is 1/ℓ, its largest logit m. Threads: OpenMP over batch × heads (forward),
 * batch × key/value heads (backward). */
#ifndef TG_OP_FLASH_ATTENTION_H
#define TG_OP_FLASH_ATTENTION_H
#include "attn_args.h"

/* Tile sizes, query rows × keys: a BQ×BK tile of logits and its weights stay in
 * cache with the K and V rows they came from. Measured flat (within 5%) from
 * 64×64 to 256×256 at T = 64 to 4096; 64×256 was the best of those. A query
 * tile's key tiles start at the first key one of its rows sees (0 without a
 * window), so a window of W keys computes about BQ × (W + BQ − 1) logits a tile. */
#define TG_FLASH_BQ 64
#define TG_FLASH_BK 256

tg_tensor *tg_flash_attend(tg_ctx *ctx, const tg_attn_args *args);

/* The textbook call, kept for today's programs and plugins: tg_flash_attend. */
tg_tensor *tg_flash_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                              float scale, int causal, tg_attn_stats *stats);

/* The per-row log-sum-exp [B, H, Tq] that the call which made `out` saved
 * (−inf for a row with no visible key); NULL when it recorded no node. Valid
 * until the reset. */
const float *tg_flash_attention_lse(const tg_ctx *ctx, const tg_tensor *out);

#endif
