/* Attention plugins of the textbook call that misbehave, for tests/plugin_cli.sh and
 * tests/attn_check_cli.sh: each is tg_attention (the right function) but for what its
 * name says. Written as ABI 1 kernels were (a tg_attention_fn, tb_NAME), each exported as
 * an ABI 2 kernel NAME that declares dv != d alone (ABI_2 below): what the loader's
 * adapter made of them before 0.20, which refuses ABI 1 plugins. The catalogue of ABI 2's
 * features: catalogue.c. */
#include <math.h>
#include <signal.h>
#include <tapegrad/tapegrad.h>

/* NAME: tb_NAME on the args, as the textbook call (dv != d: that contract's) */
#define ABI_2(name)                                                                              \
    static tg_tensor *name(tg_ctx *ctx, const tg_attn_args *a) {                                 \
        return tb_##name(ctx, a->q, a->k, a->v, a->head_scale, a->scale, a->causal, a->stats);   \
    }                                                                                            \
    TG_ATTENTION_PLUGIN(name, TG_ATTN_F_DV)

/* refuses dv != d, as a kernel written for dv = d may (measurement: not possible) */
static tg_tensor *tb_needs_dv_eq_d(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                         int causal, tg_attn_stats *stats) {
    if (v->shape[3] != q->shape[3]) tg_fail(ctx, "needs_dv_eq_d: dv %d != d %d", v->shape[3], q->shape[3]);
    return tg_attention(ctx, q, k, v, head_scale, scale, causal, stats);
}
ABI_2(needs_dv_eq_d)

/* crashes for dv != d, as one that indexes v with d would */
static tg_tensor *tb_crashes_dv(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                      int causal, tg_attn_stats *stats) {
    if (v->shape[3] != q->shape[3]) raise(SIGSEGV);
    return tg_attention(ctx, q, k, v, head_scale, scale, causal, stats);
}
ABI_2(crashes_dv)

/* ignores `scale` (the seed's bug, through the library's op) */
static tg_tensor *tb_forgets_scale(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                         int causal, tg_attn_stats *stats) {
    (void)scale;
    return tg_attention(ctx, q, k, v, head_scale, 1.0f, causal, stats);
}
ABI_2(forgets_scale)

/* ---- for attn_check: each wrong in one way, named after it ------------------------------ */
#define WRAP(name, expr_scale, expr_causal)                                                                          \
    static tg_tensor *tb_##name(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,      \
                    int causal, tg_attn_stats *stats) {                                                             \
        (void)scale, (void)causal;                                                                                  \
        return tg_attention(ctx, q, k, v, head_scale, (expr_scale), (expr_causal), stats);                          \
    }                                                                                                               \
    ABI_2(name)
WRAP(divides_by_d, 1.0f / (float)q->shape[3], causal)          /* 1/d_head where 1/sqrt(d_head) was passed */
WRAP(twice_too_warm, 2.0f * scale, causal)
WRAP(own_sqrt, 1.0f / sqrtf((float)q->shape[3]), causal)       /* computes its own scale, ignores the one passed */
WRAP(no_causal_mask, scale, 0)

/* A plain per-head attention whose mask, head scale, backward or long rows go wrong as `w` says;
 * its backward is the exact gradient of its forward unless bad_bw. */
typedef struct { int shift, drop_diag, ignore_hs, bad_bw, nan_long; } variant;
typedef struct { float *P, s[64]; variant w; int causal; } vrec;

static int visible(const variant *w, int causal, int i, int j) {
    if (!causal) return 1;
    return j <= i + w->shift && !(w->drop_diag && j == i);
}

static void v_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const vrec *r = n->saved;
    tg_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *hs = n->n_in > 3 ? n->in[3] : NULL;
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = v->shape[3];
    const float *dO = n->out->grad;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *P = r->P + (((size_t)b * H + h) * T + i) * T;
                const float *go = dO + (((size_t)b * T + i) * H + h) * dv, *qi = q->data + (((size_t)b * T + i) * H + h) * d;
                float dz[512];
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    const float *vj = v->data + (((size_t)b * T + j) * H + h) * dv;
                    float g = 0;
                    for (int e = 0; e < dv; e++) g += go[e] * vj[e];
                    dz[j] = g, dot += (double)P[j] * g;
                    if (v->grad)
                        for (int e = 0; e < dv; e++)
                            v->grad[(((size_t)b * T + j) * H + h) * dv + e] += (r->w.bad_bw ? 1.1f : 1.0f) * P[j] * go[e];
                }
                for (int j = 0; j < T; j++) {
                    if (P[j] == 0) continue;
                    const float z = P[j] * (dz[j] - (float)dot);
                    const float *kj = k->data + (((size_t)b * T + j) * H + h) * d;
                    if (hs && hs->grad && !r->w.ignore_hs) {
                        float sij = 0;
                        for (int e = 0; e < d; e++) sij += qi[e] * kj[e];
                        hs->grad[h] += r->s[63] * z * sij;
                    }
                    for (int e = 0; e < d; e++) {
                        if (q->grad) q->grad[(((size_t)b * T + i) * H + h) * d + e] += r->s[h] * z * kj[e];
                        if (k->grad) k->grad[(((size_t)b * T + j) * H + h) * d + e] += r->s[h] * z * qi[e];
                    }
                }
            }
}

static tg_tensor *variant_attention(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale,
                                    int causal, variant w) {
    const int B = q->shape[0], T = q->shape[1], H = q->shape[2], d = q->shape[3], dv = v->shape[3];
    if (T > 512 || H > 63) tg_fail(ctx, "variant: T <= 512, H < 64");
    float *Pall = tg_arena_alloc(ctx, sizeof(float) * (size_t)B * H * T * T);
    tg_tensor *out = tg_zeros(ctx, 4, (int[]){B, T, H, dv});
    vrec rec = {.P = Pall, .w = w, .causal = causal};
    rec.s[63] = scale;
    for (int h = 0; h < H; h++) rec.s[h] = scale * (hs && !w.ignore_hs ? hs->data[h] : 1.0f);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                float *P = Pall + (((size_t)b * H + h) * T + i) * T;
                const float *qi = q->data + (((size_t)b * T + i) * H + h) * d;
                float mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    P[j] = -INFINITY;
                    if (!visible(&w, causal, i, j)) continue;
                    const float *kj = k->data + (((size_t)b * T + j) * H + h) * d;
                    float z = 0;
                    for (int e = 0; e < d; e++) z += qi[e] * kj[e];
                    P[j] = rec.s[h] * z;
                    mx = fmaxf(mx, P[j]);
                }
                double sum = 0;
                for (int j = 0; j < T; j++) sum += P[j] = P[j] == -INFINITY ? 0.0f : expf(P[j] - mx);
                for (int j = 0; j < T; j++) P[j] = sum > 0 ? (float)(P[j] / sum) : 0.0f;   /* no key: a zero row */
                float *o = out->data + (((size_t)b * T + i) * H + h) * dv;
                for (int j = 0; j < T; j++)
                    for (int e = 0; e < dv; e++) o[e] += P[j] * v->data[(((size_t)b * T + j) * H + h) * dv + e];
                if (w.nan_long && T > 128)
                    for (int e = 0; e < dv; e++) o[e] = NAN;
            }
    tg_tensor *in[4] = {q, k, v, hs};
    tg_node *n = tg_record(ctx, "variant", v_backward, out, hs ? 4 : 3, in, sizeof(vrec));
    if (n) *(vrec *)n->saved = rec;
    return out;
}

#define VARIANT(name, ...)                                                                                          \
    static tg_tensor *tb_##name(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *hs, float scale, int causal,   \
                    tg_attn_stats *stats) {                                                                         \
        (void)stats;                                                                                                \
        return variant_attention(ctx, q, k, v, hs, scale, causal, (variant){__VA_ARGS__});                          \
    }                                                                                                               \
    ABI_2(name)
VARIANT(plain_right, 0)                       /* the right function, for comparison */
VARIANT(mask_off_by_one, .shift = 1)          /* row i also sees position i + 1 */
VARIANT(mask_hides_diagonal, .drop_diag = 1)  /* row i does not see itself */
VARIANT(ignores_head_scale, .ignore_hs = 1)
VARIANT(wrong_backward, .bad_bw = 1)          /* dV 10% too large */
VARIANT(nan_long_rows, .nan_long = 1)         /* NaN for T > 128 */

/* hangs on long rows */
static tg_tensor *tb_hangs_long(tg_ctx *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *head_scale, float scale,
                      int causal, tg_attn_stats *stats) {
    if (q->shape[1] > 128)
        for (volatile int spin = 1; spin;) {
        }
    return tg_attention(ctx, q, k, v, head_scale, scale, causal, stats);
}
ABI_2(hangs_long)
