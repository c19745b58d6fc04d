/* tg_attend / tg_attention: multi-head scaled dot-product attention that saves its weights: the
 * Tq×Tk weights of every head are made, kept for the backward and readable (tg_attention_probs).
 * The `saved` kernel (attn_kernel.h); `composed` before 0.20. Computed in register-blocked tiles
 * (attn_tile.h): the logits, the softmax across the queries of a key, the product with V.
 *
 * What it computes, for which shapes, and its gradient: the contract (attn_args.h): one struct,
 * tg_attn_args, that this op, tg_flash_attend (flash_attention.h) and any kernel take.
 *   out = softmax(x) V per batch row and query head, x the logits of the visible keys;
 *   dV = P̃ᵀ dO,  dx = P ⊙ (dP − D),  dQ = s·dy K,  dK = s·dyᵀ Q  (attn_args.h has every term).
 * Under a context precision (tg_ctx_set_precision, 0.22) every product reads its operands rounded
 * to it: q, k, v, dO, the weights P̃ and dy (dS); sums, softmax and outputs stay float32. */
#ifndef TG_OP_ATTENTION_H
#define TG_OP_ATTENTION_H
#include "attn_args.h"
#include "attn_kernel.h"   /* the kernel ABI and the tables, here before 0.20: kept for 0.19's includes through 0.20 */

tg_tensor *tg_attend(tg_ctx *ctx, const tg_attn_args *args);

/* The textbook call (Tq = Tk, Hkv = H, no window, no padding), kept for the
 * programs and plugins written before tg_attn_args: tg_attend with those args. */
tg_tensor *tg_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale,
                        float scale, int causal, tg_attn_stats *stats);

/* The weights P [B, H, Tq, Tk] (invisible entries 0) that the tg_attend call
 * which made `out` saved on ctx's tape; NULL when that call recorded no node
 * (no input needed a gradient, or grad was disabled). Valid until the reset.
 * The op keeps them key-major (a key's row holds its queries: the softmax runs
 * across queries); this row-major copy is made on ctx's arena at the first
 * call for `out` (hence ctx not const since 0.19), later calls return it. */
const float *tg_attention_probs(tg_ctx *ctx, const tg_tensor *out);

/* The code tg_attend's tiles run on here: "avx512", "avx2" (picked at run time
 * by what the CPU runs; AVX2 on any machine in a -DTG_AVX512_CLONES=OFF build)
 * or "c"; since 0.19.4 "avx512-r4" or "avx2-r4" on AMD family 19h (Zen 4): the
 * same copies with the products a tile wide (16 floats) in blocks of 4 rows.
 * All give the same bits (tests/test_attn_tile.c). Since 0.19. */
const char *tg_attn_tiles(void);

#endif
