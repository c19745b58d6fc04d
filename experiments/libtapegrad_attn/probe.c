#include "tg_attn_probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const tg_attn_kernel *kernel;
    const tg_attn_args *args;
    tg_tensor *out;
} call_job;

static void call_kernel(tg_ctx *ctx, void *u) {
    call_job *j = u;
    j->out = tg_attn_kernel_call(ctx, j->kernel, j->args);
}

tg_tensor *tg_attn_call_caught(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, int grad,
                               char *msg, size_t len) {
    call_job j = {kernel, args, NULL};
    const int was = ctx->grad_enabled;
    if (len) msg[0] = 0;
    ctx->grad_enabled = grad;
    const int rc = tg_try(ctx, call_kernel, &j, msg, len);
    ctx->grad_enabled = was;
    return rc ? NULL : j.out;
}

/* The kernel's call with V = the identity over key positions, padded with zero
 * columns to dv = d when Tk < d; NULL (message in err) when it failed. */
static tg_tensor *call_identity(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, int dropout,
                                char *err, size_t errlen) {
    const tg_tensor *q = args->q, *k = args->k;
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              Hkv = k->shape[2], dv = Tk < d ? d : Tk;
    tg_tensor *v = tg_zeros(ctx, 4, (int[]){B, Tk, Hkv, dv});
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Tk; j++)
            for (int g = 0; g < Hkv; g++) v->data[(((size_t)b * Tk + j) * Hkv + g) * dv + j] = 1.0f;
    tg_attn_args a = tg_attn_args_of(args);
    a.v = v, a.stats = NULL;
    if (!dropout) a.dropout = 0, a.dropout_seed = 0;
    if (dv != d && !(kernel->features & TG_ATTN_F_DV)) {
        /* a kernel without dv != d: q and k zero-padded to dv columns, which leaves every q·k as it was */
        tg_tensor *qp = tg_zeros(ctx, 4, (int[]){B, Tq, H, dv}), *kp = tg_zeros(ctx, 4, (int[]){B, Tk, Hkv, dv});
        for (int64_t r = 0; r < (int64_t)B * Tq * H; r++) memcpy(qp->data + r * dv, q->data + r * d, sizeof(float) * d);
        for (int64_t r = 0; r < (int64_t)B * Tk * Hkv; r++) memcpy(kp->data + r * dv, k->data + r * d, sizeof(float) * d);
        a.q = qp, a.k = kp;
        /* a kernel's own scale may read q's width (scale_rsqrt_d: 1/√dv now): the padded call fitted to its
         * conventions as every call is, and q grown by what that changed, so the logits stay the call's */
        const float asked = a.scale;
        tg_attn_conform(tg_attn_kernel_conventions(kernel), &a);
        if (a.scale != asked)
            for (int64_t i = 0; i < qp->numel; i++) qp->data[i] *= asked / a.scale;
    }
    char msg[400];
    tg_tensor *o = tg_attn_call_caught(ctx, kernel, &a, 0, msg, sizeof msg);
    if (!o && msg[0]) {
        tg_errf(err, errlen, "the call with V = identity (dv = %d) failed: %s", dv, msg);   /* refused, or an exec kernel that died */
        return NULL;
    }
    if (!o || o->ndim != 4 || o->shape[0] != B || o->shape[1] != Tq || o->shape[2] != H || o->shape[3] != dv) {
        tg_errf(err, errlen, "with V = identity (dv = %d) the kernel returned %s, not [%d,%d,%d,%d]", dv,
                o ? TG_SHAPE(o) : "NULL", B, Tq, H, dv);
        return NULL;
    }
    for (int64_t i = 0; i < o->numel; i++)   /* the padding columns of V are zero: so must the output's be */
        if (i % dv >= Tk && o->data[i] != 0.0f) {
            tg_errf(err, errlen, "with V = identity padded to dv = %d the kernel put %g in a zero column: not a "
                    "weighted sum of V's rows", dv, o->data[i]);
            return NULL;
        }
    return o;
}

double tg_attn_weight_tol(const tg_attn_kernel *kernel) {
    return 1e-3 + 2 * tg_precision_u(tg_attn_kernel_precision(kernel));
}

int tg_attn_weights(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, float *probs, char *err,
                    size_t errlen) {
    const tg_tensor *q = args->q, *k = args->k;
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              dv = Tk < d ? d : Tk;
    tg_tensor *o = call_identity(ctx, kernel, args, 1, err, errlen);
    if (!o) return -1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++)
                memcpy(probs + (((size_t)b * H + h) * Tq + i) * Tk, o->data + (((size_t)b * Tq + i) * H + h) * dv,
                       sizeof(float) * Tk);
    return 0;
}

/* With V = identity, o holds the weights: each row's must be weights (finite,
 * >= 0, summing to 1, or at most 1 with sinks, 0 with no key, within 1e-3 and
 * two roundings of the kernel's precision: a bf16 kernel rounds each weight and
 * its output) and none on a key the call hides. TG_MEASURE_OK, _FAILED or _LEAK
 * (err says where). */
static int check_weights(const tg_attn_args *args, const tg_tensor *o, int dv, double tol, char *err, size_t errlen) {
    const tg_attn_args *a = args;
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], Tk = a->k->shape[1];
    const float *bias = a->bias ? a->bias->data : NULL;
    const int bB = a->bias ? a->bias->shape[0] : 1, bH = a->bias ? a->bias->shape[1] : 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *p = o->data + (((size_t)b * Tq + i) * H + h) * dv;
                int lo, hi;
                tg_attn_visible(a, b, i, &lo, &hi);
                double sum = 0;
                for (int j = 0; j < Tk; j++) {
                    if (!isfinite(p[j]) || p[j] < -1e-6f)
                        return tg_errf(err, errlen, "with V = identity the kernel's output holds %g (batch %d, head %d, "
                                       "row %d, key %d): not attention weights", p[j], b, h, i, j), TG_MEASURE_FAILED;
                    const int hidden = j < lo || j >= hi ||
                                       (bias && isinf(bias[(((size_t)(bB == 1 ? 0 : b) * bH + (bH == 1 ? 0 : h)) * Tq + i) * Tk + j]));
                    if (hidden && fabsf(p[j]) > 1e-6f) {
                        tg_errf(err, errlen, "with V = identity the kernel puts weight %g on key %d of row %d (head %d, "
                                "batch %d), which the call hides (row %d sees keys %d..%d): %s", p[j], j, i, h, b, i, lo,
                                hi - 1, a->causal && j > i + Tk - Tq ? "not causal weights" : "a leak past the mask");
                        return TG_MEASURE_LEAK;
                    }
                    sum += p[j];
                }
                const int sinks = a->sinks != NULL;
                if (lo == hi ? sum > tol : sinks ? sum > 1 + tol : fabs(sum - 1.0) > tol)
                    return tg_errf(err, errlen, "with V = identity row %d of head %d sums to %g, not %s: not attention "
                                   "weights (does the kernel assume dv = d?)", i, h, sum,
                                   lo == hi ? "0 (it sees no key)" : sinks ? "at most 1" : "1"), TG_MEASURE_FAILED;
            }
    return TG_MEASURE_OK;
}

/* Head h's entropy, saturation, max logit and temperature c (the slope of
 * log-weights on q·k over each row's visible keys) from its weights in o.
 * s, lp: 2 rows of Tk doubles of room. */
static void head_stats(const tg_attn_args *args, const tg_tensor *o, int dv, int h, int prec, double *s, double *lp,
                       tg_attn_stats *stats, float *mult) {
    /* weights too small to hold their precision's significant bits (fp16's subnormals) say little of c */
    const float tiny = prec == TG_FP16 ? 0x1p-14f : 1e-30f;
    const tg_attn_args *a = args;
    const tg_tensor *q = a->q, *k = a->k;
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              Hkv = k->shape[2], group = H / Hkv;
    const float *bias = a->bias ? a->bias->data : NULL, *alibi = a->alibi ? a->alibi->data : NULL;
    const int bB = a->bias ? a->bias->shape[0] : 1, bH = a->bias ? a->bias->shape[1] : 1;
    const int g = h / group;
    double ent = 0, sat = 0, rows = 0, sxy = 0, sxx = 0, smax = -INFINITY, smin = INFINITY;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tq; i++) {
            const float *p = o->data + (((size_t)b * Tq + i) * H + h) * dv;
            const float *qi = q->data + (((size_t)b * Tq + i) * H + h) * d;
            const float *brow = bias ? bias + (((size_t)(bB == 1 ? 0 : b) * bH + (bH == 1 ? 0 : h)) * Tq + i) * Tk : NULL;
            int lo, hi;
            tg_attn_visible(a, b, i, &lo, &hi);
            if (lo == hi) continue;
            int m = 0;
            double ms = 0, ml = 0, pmax = 0;
            for (int j = lo; j < hi; j++) {
                const float *kj = k->data + (((size_t)b * Tk + j) * Hkv + g) * d;
                double dot = 0;
                for (int e = 0; e < d; e++) dot += (double)qi[e] * kj[e];
                if (dot > smax) smax = dot;
                if (dot < smin) smin = dot;
                const double pj = p[j];   /* as the built-in ops' stats: a sink's share is no key's */
                if (pj > 0) ent -= pj * log(pj);
                if (pj > pmax) pmax = pj;
                if (p[j] > tiny && !(brow && isinf(brow[j]))) {
                    double known = (brow ? brow[j] : 0) - (alibi ? alibi[h] * fabs((double)j - (i + Tk - Tq)) : 0);
                    s[m] = dot, lp[m] = log(p[j]) - known;
                    ms += dot, ml += lp[m];
                    m++;
                }
            }
            rows++;
            sat += pmax > 0.99;
            if (m < 2) continue;
            ms /= m, ml /= m;
            for (int j = 0; j < m; j++) sxy += (s[j] - ms) * (lp[j] - ml), sxx += (s[j] - ms) * (s[j] - ms);
        }
    double c = sxx > 0 ? sxy / sxx : NAN;
    if (stats && stats->entropy) stats->entropy[h] = (float)(rows ? ent / rows : 0);
    if (stats && stats->saturation) stats->saturation[h] = (float)(rows ? sat / rows : 0);
    if (stats && stats->max_logit) stats->max_logit[h] = (float)(isnan(c) ? NAN : c >= 0 ? c * smax : c * smin);
    if (mult) mult[h] = (float)c;
}

int tg_attn_measure(tg_ctx *ctx, const tg_attn_kernel *kernel, const tg_attn_args *args, tg_attn_stats *stats,
                    float *mult, float *probs, char *err, size_t errlen) {
    const tg_tensor *q = args->q, *k = args->k;
    if (!q || !k || q->ndim != 4 || k->ndim != 4 || q->shape[0] != k->shape[0] || q->shape[3] != k->shape[3] ||
        k->shape[2] <= 0 || q->shape[2] % k->shape[2])
        return tg_errf(err, errlen, "tg_attn_measure: q %s and k %s must be [B,Tq,H,d] and [B,Tk,Hkv,d], H a multiple "
                       "of Hkv", q ? TG_SHAPE(q) : "NULL", k ? TG_SHAPE(k) : "NULL");
    const int B = q->shape[0], Tq = q->shape[1], H = q->shape[2], d = q->shape[3], Tk = k->shape[1],
              dv = Tk < d ? d : Tk;
    const tg_attn_args a = tg_attn_args_of(args);
    tg_tensor *o = call_identity(ctx, kernel, &a, 0, err, errlen);
    if (!o) return TG_MEASURE_FAILED;
    /* the weights must be weights: that is what makes the rest mean anything */
    const int prec = tg_attn_kernel_precision(kernel);
    const int rc = check_weights(&a, o, dv, tg_attn_weight_tol(kernel), err, errlen);
    if (rc != TG_MEASURE_OK) return rc;
    /* one row's logits and log-weights, from the step's arena: a logged step mallocs nothing past the first */
    double *s = tg_arena_alloc(ctx, sizeof(double) * 2 * (size_t)(Tk > 0 ? Tk : 1)), *lp = s + (Tk > 0 ? Tk : 1);
    for (int h = 0; h < H; h++) head_stats(&a, o, dv, h, prec, s, lp, stats, mult);
    if (probs)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < Tq; i++)
                    memcpy(probs + (((size_t)b * H + h) * Tq + i) * Tk, o->data + (((size_t)b * Tq + i) * H + h) * dv,
                           sizeof(float) * Tk);
    return TG_MEASURE_OK;
}
