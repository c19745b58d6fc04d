/* The attention ops' shared checks and geometry (ops/attn_geom.h). */
#include "attn_geom.h"
#include "tg_precision.h"

#include <math.h>
#include <string.h>

#include "gemm.h"
#include "parallel.h"

tg_attn_args tg_attn_args_make(tg_tensor *q, tg_tensor *k, tg_tensor *v, float scale) {
    return (tg_attn_args){.size = sizeof(tg_attn_args), .q = q, .k = k, .v = v, .scale = scale,
                          .window_left = -1, .window_right = -1};
}

tg_attn_args tg_attn_args_of(const tg_attn_args *args) {
    tg_attn_args a = tg_attn_args_make(NULL, NULL, NULL, 0);
    memcpy(&a, args, args->size < sizeof a ? args->size : sizeof a);
    a.size = sizeof a;
    return a;
}

void tg_attn_geom_of(const tg_attn_args *a, tg_attn_geom *g) {
    *g = (tg_attn_geom){.B = a->q->shape[0], .Tq = a->q->shape[1], .H = a->q->shape[2], .d = a->q->shape[3],
                        .Tk = a->k->shape[1], .Hkv = a->k->shape[2], .dv = a->v->shape[3], .scale = a->scale,
                        .causal = !!a->causal, .left = a->window_left,
                        .right = a->causal ? 0 : a->window_right, .kv_len = (int *)a->kv_len,
                        .softcap = a->softcap, .alibi = a->alibi ? a->alibi->data : NULL,
                        .sinks = a->sinks ? a->sinks->data : NULL, .dropout = a->dropout,
                        .drop_scale = (float)(1.0 / (1.0 - (double)a->dropout)), .seed = a->dropout_seed};
    g->group = g->Hkv > 0 ? g->H / g->Hkv : 1;
    if (a->bias) g->bias = a->bias->data, g->bias_B = a->bias->shape[0], g->bias_H = a->bias->shape[1];
    g->extras = g->softcap > 0 || g->bias || g->alibi;
    /* p of the 2^24 hash values drop: the keep rate is 1 − p to within 2^-24 */
    g->drop_below = (uint32_t)ceil((double)a->dropout * 16777216.0);
}

tg_tensor *tg_attn_operand(tg_ctx *ctx, int prec, tg_tensor *t) {
    if (prec == TG_FP32 || !t) return t;
    tg_tensor *y = tg_arena_alloc(ctx, sizeof *y);
    *y = *t;
    y->data = (float *)tg_operand(ctx, prec, t->data, t->numel);
    return y;
}

void tg_attn_read(tg_ctx *ctx, const char *op, const tg_attn_args *args, tg_attn_args *a, tg_attn_geom *g) {
    if (!args) tg_fail(ctx, "%s: args is NULL", op);
    /* a caller built against another version: read what its size holds, default the rest */
    if (args->size < TG_ATTN_ARGS_SIZE_V1)
        tg_fail(ctx, "%s: args.size is %zu, less than the first version's %zu: make the args with tg_attn_args_make",
                op, args->size, (size_t)TG_ATTN_ARGS_SIZE_V1);
    if (args->size > sizeof *a) {   /* a newer caller: its extra fields must be at their defaults (zero) */
        const unsigned char *x = (const unsigned char *)args;
        for (size_t i = sizeof *a; i < args->size; i++)
            if (x[i])
                tg_fail(ctx, "%s: args.size is %zu and sets fields this tapegrad (args of %zu bytes) does not know: "
                        "byte %zu is not 0", op, args->size, sizeof *a, i);
    }
    *a = tg_attn_args_of(args);
    const tg_tensor *q = a->q, *k = a->k, *v = a->v;
    if (!q || !k || !v) tg_fail(ctx, "%s: q, k and v must all be given (q %p, k %p, v %p)", op, (void *)q, (void *)k, (void *)v);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        tg_fail(ctx, "%s: q, k and v must be 4-D [B,T,H,d]: q %s, k %s, v %s", op, TG_SHAPE(q), TG_SHAPE(k), TG_SHAPE(v));
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || k->shape[3] != q->shape[3] ||
        v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2])
        tg_fail(ctx, "%s: expected q [B,Tq,H,d], k [B,Tk,Hkv,d], v [B,Tk,Hkv,dv] (one B, q and k one d, k and v one "
                "Tk and Hkv): q %s, k %s, v %s", op, TG_SHAPE(q), TG_SHAPE(k), TG_SHAPE(v));
    if (a->layer < 0) tg_fail(ctx, "%s: layer %d: a model's layer index is 0 or more", op, a->layer);
    const int B = q->shape[0], H = q->shape[2], Hkv = k->shape[2], Tk = k->shape[1];
    if (H % Hkv)
        tg_fail(ctx, "%s: H = %d query heads is not a multiple of Hkv = %d key/value heads (q %s, k %s)", op, H, Hkv,
                TG_SHAPE(q), TG_SHAPE(k));
    /* the scores [B,H,Tq,Tk] in bytes, twice (an op keeps up to two such matrices): shapes whose product
     * wraps around a size_t would ask the arena for a small size and write past it */
    size_t bytes;
    if (__builtin_mul_overflow((size_t)B * (size_t)H, (size_t)q->shape[1], &bytes) ||
        __builtin_mul_overflow(bytes, (size_t)Tk, &bytes) || __builtin_mul_overflow(bytes, 2 * sizeof(float), &bytes))
        tg_fail(ctx, "%s: q %s and k %s make B*H*Tq*Tk = %d*%d*%d*%d scores, more bytes than a size_t counts", op,
                TG_SHAPE(q), TG_SHAPE(k), B, H, q->shape[1], Tk);
    if (a->head_scale && (a->head_scale->ndim != 1 || a->head_scale->shape[0] != H))
        tg_fail(ctx, "%s: head_scale must be [H] = [%d] for q %s, got %s", op, H, TG_SHAPE(q), TG_SHAPE(a->head_scale));
    if (a->stats && a->stats->H != H)
        tg_fail(ctx, "%s: stats->H is %d but q %s has H = %d heads", op, a->stats->H, TG_SHAPE(q), H);
    if (!isfinite(a->scale)) tg_fail(ctx, "%s: scale must be finite, got %g", op, (double)a->scale);
    if (a->window_left < -1 || a->window_right < -1)
        tg_fail(ctx, "%s: window (left %d, right %d): each must be >= 0, or -1 for unbounded", op, a->window_left,
                a->window_right);
    const int Tq = q->shape[1];
    const tg_tensor *bias = a->bias;
    if (bias && (bias->ndim != 4 || (bias->shape[0] != B && bias->shape[0] != 1) ||
                 (bias->shape[1] != H && bias->shape[1] != 1) || bias->shape[2] != Tq || bias->shape[3] != Tk))
        tg_fail(ctx, "%s: bias %s does not broadcast to [B,H,Tq,Tk] = [%d,%d,%d,%d] (its B and H may be 1)", op,
                TG_SHAPE(bias), B, H, Tq, Tk);
    if (a->alibi && (a->alibi->ndim != 1 || a->alibi->shape[0] != H))
        tg_fail(ctx, "%s: alibi slopes must be [H] = [%d], got %s", op, H, TG_SHAPE(a->alibi));
    if (a->alibi && a->alibi->requires_grad)
        tg_fail(ctx, "%s: alibi slopes take no gradient (ALiBi's are fixed): pass a tensor that requires none", op);
    if (a->sinks && (a->sinks->ndim != 1 || a->sinks->shape[0] != H))
        tg_fail(ctx, "%s: sinks must be [H] = [%d], got %s", op, H, TG_SHAPE(a->sinks));
    if (!(a->softcap >= 0) || !isfinite(a->softcap))
        tg_fail(ctx, "%s: softcap %g: the cap must be > 0 (or 0 for none) and finite", op, (double)a->softcap);
    if (!(a->dropout >= 0 && a->dropout < 1))
        tg_fail(ctx, "%s: dropout %g is outside [0, 1)", op, (double)a->dropout);
    int *kv = NULL;
    if (a->kv_len) {
        for (int b = 0; b < B; b++)
            if (a->kv_len[b] < 0 || a->kv_len[b] > Tk)
                tg_fail(ctx, "%s: kv_len[%d] = %d is outside [0, Tk = %d] (k %s)", op, b, a->kv_len[b], Tk, TG_SHAPE(k));
        kv = tg_arena_alloc(ctx, (size_t)B * sizeof *kv);
        memcpy(kv, a->kv_len, (size_t)B * sizeof *kv);
    }
    tg_attn_geom_of(a, g);
    g->prec = ctx->precision;
    g->kv_len = kv;
}

typedef struct { const tg_attn_geom *g; const float *k; float *kt; } kt_job;

static void kt_item(void *arg, int bk, int thread) {
    (void)thread;
    const kt_job *j = arg;
    const tg_attn_geom *g = j->g;
    const int b = bk / g->Hkv, kh = bk % g->Hkv, ld = g->Hkv * g->d;
    tg_transpose(j->k + ((int64_t)b * g->Tk * g->Hkv + kh) * g->d, ld, g->Tk, g->d, j->kt + (int64_t)bk * g->d * g->Tk);
}

float *tg_attn_kt(tg_ctx *ctx, const tg_attn_geom *g, const float *k) {
    kt_job j = {g, k, tg_arena_alloc(ctx, (size_t)g->B * g->Hkv * g->d * g->Tk * sizeof(float))};
    tg_parallel_for(g->B * g->Hkv, (int64_t)g->B * g->Hkv * g->d * g->Tk * TG_WORK_COPY, kt_item, &j);
    return j.kt;
}

void tg_attn_visible(const tg_attn_args *a, int b, int i, int *lo, int *hi) {
    tg_attn_geom g;
    tg_attn_geom_of(a, &g);
    tg_attn_span(&g, b, i, lo, hi);
}

int tg_attn_kept(const tg_attn_args *a, int b, int h, int i, int j) {
    tg_attn_geom g;
    tg_attn_geom_of(a, &g);
    return tg_attn_keep(&g, b, h, i, j);
}

double tg_attn_uniform_entropy(int T, int causal) {
    if (!causal) return log((double)T);
    double sum = 0;
    for (int i = 0; i < T; i++) sum += log((double)(i + 1));
    return sum / T;
}

double tg_attn_uniform_entropy_args(const tg_attn_args *a) {
    tg_attn_geom g;
    tg_attn_geom_of(a, &g);
    double sum = 0;
    int64_t rows = 0;
    for (int b = 0; b < g.B; b++)
        for (int i = 0; i < g.Tq; i++) {
            int lo, hi;
            tg_attn_span(&g, b, i, &lo, &hi);
            if (hi > lo) sum += log((double)(hi - lo)), rows++;
        }
    return rows ? sum / (double)rows : 0;
}

void tg_attn_stats_fill(tg_attn_stats *stats, const tg_attn_part *parts, int B, int H) {
    if (!stats) return;
    for (int h = 0; h < H; h++) {
        double ent = 0;
        float mx = -INFINITY;
        int64_t sat = 0, rows = 0;
        for (int b = 0; b < B; b++) {
            const tg_attn_part *p = &parts[b * H + h];
            ent += p->entropy;
            mx = p->max_logit > mx ? p->max_logit : mx;
            sat += p->saturated;
            rows += p->rows;
        }
        if (stats->entropy) stats->entropy[h] = rows ? (float)(ent / (double)rows) : 0.0f;
        if (stats->max_logit) stats->max_logit[h] = mx;
        if (stats->saturation) stats->saturation[h] = rows ? (float)((double)sat / (double)rows) : 0.0f;
    }
}
