/* Plugins that test loading (tests/plugin_cli.sh), one per -D:
 *   CASE_HIDDEN       ABI 2, built with -fvisibility=hidden: the descriptor is still exported
 *   CASE_ABI1_HIDDEN  ABI 1 (a tg_attention_fn and TG_ATTENTION_PLUGIN_DECLARE), -fvisibility=hidden too
 *   CASE_NONE         a tg_attention_fn that declares no ABI: refused
 *   CASE_ABI3         a descriptor of another ABI: refused, naming both
 *   CASE_LONG         ABI 2 under a 127-byte name (a checkpoint's settings must keep it whole) */
#include <tapegrad/tapegrad.h>

#if defined(CASE_HIDDEN)
static tg_tensor *attention(tg_ctx *ctx, const tg_attn_args *a) { return tg_attend(ctx, a); }
TG_ATTENTION_PLUGIN(attention, TG_ATTN_F_ALL)
#elif defined(CASE_ABI1_HIDDEN) || defined(CASE_NONE)
__attribute__((visibility("default")))   /* the function must be visible either way */
tg_tensor *attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale, int causal,
                     tg_attn_stats *stats) {
    return tg_attention(ctx, q, k, v, hs, scale, causal, stats);
}
#ifdef CASE_ABI1_HIDDEN
TG_ATTENTION_PLUGIN_DECLARE   /* exported even under -fvisibility=hidden */
#endif
#elif defined(CASE_ABI3)
static tg_tensor *attention(tg_ctx *ctx, const tg_attn_args *a) { return tg_attend(ctx, a); }
__attribute__((visibility("default"))) const tg_attn_kernel tg_attn_plugin_attention = {sizeof(tg_attn_kernel), 3,
                                                                                       TG_ATTN_F_DV, "x", attention, 0, 0, 0, 0, 0};
#elif defined(CASE_LONG)
#define LONG_NAME k123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890abcdef
static tg_tensor *LONG_NAME(tg_ctx *ctx, const tg_attn_args *a) { return tg_attend(ctx, a); }
TG_ATTENTION_PLUGIN(LONG_NAME, TG_ATTN_F_ALL)
#endif
