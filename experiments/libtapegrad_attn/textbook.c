/* The textbook attention in a precision (check_internal.h: tgc_textbook), for judging a kernel
 * that computes in bf16 or fp16 as FlashAttention's tests do: against an exact reference, with the
 * error a textbook computation in the same precision makes as the measure of what is fair
 * (Dao-AILab/flash-attention's test_flash_attn.py: attention_ref with upcast off). */
#include "check_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int prec, inner;   /* inner: round where a computation in prec rounds, else exact (double) */
} rounding;
static double rd(rounding r, double x) { return r.inner ? tg_round_to(r.prec, (float)x) : x; }

/* one query row's logits x (visible keys: hidden ones −inf) and their capped pre-images in y */
static void row_logits(const tg_attn_args *a, const float *q, const float *k, int b, int h, int i, rounding r,
                       double *x, double *y) {
    const int Tq = a->q->shape[1], H = a->q->shape[2], d = a->q->shape[3], Tk = a->k->shape[1],
              Hkv = a->k->shape[2], g = h / (H / Hkv);
    const double s = (double)a->scale * (a->head_scale ? a->head_scale->data[h] : 1.0);
    int lo, hi;
    tg_attn_visible(a, b, i, &lo, &hi);
    for (int j = 0; j < Tk; j++) {
        x[j] = y[j] = -INFINITY;
        if (j < lo || j >= hi) continue;
        const float *qi = q + (((size_t)b * Tq + i) * H + h) * d, *kj = k + (((size_t)b * Tk + j) * Hkv + g) * d;
        double dot = 0;
        for (int e = 0; e < d; e++) dot += (double)qi[e] * kj[e];
        double v = rd(r, s * dot);
        y[j] = v;
        if (a->softcap > 0) v = rd(r, a->softcap * tanh(v / a->softcap));
        if (a->bias) {
            const tg_tensor *bt = a->bias;
            v += bt->data[(((size_t)(bt->shape[0] == 1 ? 0 : b) * bt->shape[1] + (bt->shape[1] == 1 ? 0 : h)) * Tq + i) *
                              Tk + j];
        }
        if (a->alibi) v -= a->alibi->data[h] * fabs((double)j - (i + Tk - Tq));
        x[j] = rd(r, v);
    }
}

void tgc_textbook(const tg_attn_args *a, int prec, int inner, const float *dout, float *out, float *dq, float *dk,
                  float *dv) {
    const int B = a->q->shape[0], Tq = a->q->shape[1], H = a->q->shape[2], d = a->q->shape[3], Tk = a->k->shape[1],
              Hkv = a->k->shape[2], DV = a->v->shape[3], group = H / Hkv;
    const rounding r = {prec, inner};
    const size_t nq = (size_t)a->q->numel, nk = (size_t)a->k->numel, nv = (size_t)a->v->numel;
    float *q = malloc(sizeof(float) * (nq + nk + nv)), *k = q + nq, *v = k + nk;
    double *x = malloc(sizeof(double) * 4 * (size_t)Tk), *y = x + Tk, *P = y + Tk, *dP = P + Tk;
    double *gq = calloc(nq + nk + nv, sizeof(double)), *gk = gq + nq, *gv = gk + nk;
    if (!q || !x || !gq) abort();   /* a few kB: attn_check's own shapes */
    memcpy(q, a->q->data, sizeof(float) * nq), memcpy(k, a->k->data, sizeof(float) * nk), memcpy(v, a->v->data, sizeof(float) * nv);
    tg_round_all(prec, q, (int64_t)nq), tg_round_all(prec, k, (int64_t)nk), tg_round_all(prec, v, (int64_t)nv);
    const double keep = a->dropout > 0 ? 1.0 / (1.0 - a->dropout) : 1.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const int g = h / group;
                const double s = (double)a->scale * (a->head_scale ? a->head_scale->data[h] : 1.0);
                row_logits(a, q, k, b, h, i, r, x, y);
                double m = a->sinks ? a->sinks->data[h] : -INFINITY, z = 0;
                for (int j = 0; j < Tk; j++) m = fmax(m, x[j]);
                for (int j = 0; j < Tk; j++) z += x[j] > -INFINITY ? exp(x[j] - m) : 0;
                if (a->sinks && isfinite(a->sinks->data[h])) z += exp(a->sinks->data[h] - m);
                float *o = out + (((size_t)b * Tq + i) * H + h) * DV;
                for (int j = 0; j < Tk; j++) {
                    P[j] = z > 0 && x[j] > -INFINITY ? rd(r, exp(x[j] - m) / z) : 0;
                    if (a->dropout > 0 && P[j] > 0 && !tg_attn_kept(a, b, h, i, j)) P[j] = -P[j];   /* dropped: marked */
                }
                for (int e = 0; e < DV; e++) {
                    double acc = 0;
                    for (int j = 0; j < Tk; j++)
                        if (P[j] > 0) acc += P[j] * keep * v[(((size_t)b * Tk + j) * Hkv + g) * DV + e];
                    o[e] = (float)rd(r, acc);
                }
                if (!dout) continue;
                const float *go = dout + (((size_t)b * Tq + i) * H + h) * DV;
                double D = 0;
                for (int j = 0; j < Tk; j++) {
                    dP[j] = 0;
                    if (P[j] > 0) {
                        double acc = 0;
                        for (int e = 0; e < DV; e++)
                            acc += tg_round_to(prec, go[e]) * (double)v[(((size_t)b * Tk + j) * Hkv + g) * DV + e];
                        dP[j] = rd(r, acc * keep);
                    }
                    D += fabs(P[j]) * dP[j];
                }
                for (int j = 0; j < Tk; j++) {
                    if (P[j] == 0) continue;
                    const double p = fabs(P[j]);
                    if (P[j] > 0)
                        for (int e = 0; e < DV; e++)
                            gv[(((size_t)b * Tk + j) * Hkv + g) * DV + e] += p * keep * tg_round_to(prec, go[e]);
                    double dx = rd(r, p * (dP[j] - D));
                    if (a->softcap > 0) {
                        const double t = tanh(y[j] / a->softcap);
                        dx = rd(r, dx * (1 - t * t));
                    }
                    const float *qi = q + (((size_t)b * Tq + i) * H + h) * d, *kj = k + (((size_t)b * Tk + j) * Hkv + g) * d;
                    double *gqi = gq + (((size_t)b * Tq + i) * H + h) * d, *gkj = gk + (((size_t)b * Tk + j) * Hkv + g) * d;
                    for (int e = 0; e < d; e++) gqi[e] += s * dx * kj[e], gkj[e] += s * dx * qi[e];
                }
            }
    if (dout) {
        for (size_t i = 0; i < nq; i++) dq[i] = (float)rd(r, gq[i]);
        for (size_t i = 0; i < nk; i++) dk[i] = (float)rd(r, gk[i]);
        for (size_t i = 0; i < nv; i++) dv[i] = (float)rd(r, gv[i]);
    }
    free(q), free(x), free(gq);
}

/* max |x − ref| over n values; -1 when x holds a non-finite value */
static double max_err(const float *x, const float *ref, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return -1;
        e = fmax(e, fabs((double)x[i] - ref[i]));
    }
    return e;
}
static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

double tgc_lowprec_ratio(const float *got, const float *exact, const float *textbook, int64_t n, double mult,
                         double floor_rel, double *err, double *allowed) {
    const double e = max_err(got, exact, n), t = max_err(textbook, exact, n), scale = max_abs(exact, n);
    *err = e / (scale > 0 ? scale : 1);
    *allowed = (mult * t + floor_rel * scale) / (scale > 0 ? scale : 1);
    return e < 0 ? -1 : *err / *allowed;
}
