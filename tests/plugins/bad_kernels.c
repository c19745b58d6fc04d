/* Attention plugins that misbehave, for tests/plugin_cli.sh and test_attn_probe:
 * each is tg_attention (the right function) but for what its name says. */
#include <signal.h>
#include <tapegrad/tapegrad.h>

/* refuses dv != d, as a kernel written for dv = d may (measurement: not possible) */
tg_tensor *needs_dv_eq_d(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                         int causal, tg_attn_stats *stats) {
    if (v->shape[3] != q->shape[3]) tg_fail(ctx, "needs_dv_eq_d: dv %d != d %d", v->shape[3], q->shape[3]);
    return tg_attention(ctx, q, k, v, head_scale, scale, causal, stats);
}

/* crashes for dv != d, as one that indexes v with d would */
tg_tensor *crashes_dv(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                      int causal, tg_attn_stats *stats) {
    if (v->shape[3] != q->shape[3]) raise(SIGSEGV);
    return tg_attention(ctx, q, k, v, head_scale, scale, causal, stats);
}

/* ignores `scale` (the seed's bug, through the library's op) */
tg_tensor *forgets_scale(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                         int causal, tg_attn_stats *stats) {
    (void)scale;
    return tg_attention(ctx, q, k, v, head_scale, 1.0f, causal, stats);
}
