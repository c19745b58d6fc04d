/* Internal to the attention ops (not installed, not exported): the argument
 * checks tg_attention and tg_flash_attention share (shapes of q, k, v,
 * head_scale, stats->H, a finite scale); messages start with `op`. */
#ifndef TG_OPS_ATTN_CHECK_H
#define TG_OPS_ATTN_CHECK_H
#include "attention.h"

__attribute__((visibility("hidden"))) void tg_attention_check(tg_ctx *ctx, const char *op, const tg_tensor *q,
                                                              const tg_tensor *k, const tg_tensor *v,
                                                              const tg_tensor *head_scale, float scale,
                                                              const tg_attn_stats *stats);

#endif
