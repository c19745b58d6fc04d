/* Adafactor (Shazeer & Stern 2018) over the flat parameter buffers, one
 * parameter at a time: its factored second moments, update clipping and the
 * step relative to its size all need the whole tensor (tg_optim.h). */
#include "tg_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A matrix is factored over its last two dimensions, one (R, C) pair per index of the dimensions
 * before them (a [2, r, c] tensor has two); anything with fewer dimensions keeps a full V. */
static void factors(const tg_tensor *t, int64_t *batch, int64_t *rows, int64_t *cols) {
    if (t->ndim >= 2) {
        *rows = t->shape[t->ndim - 2], *cols = t->shape[t->ndim - 1];
        *batch = *rows && *cols ? t->numel / (*rows * *cols) : 0;
    } else {
        *batch = 0, *rows = 0, *cols = 0;
    }
}

size_t tg_adafactor_state_size(const tg_tensor *t) {
    int64_t b, r, c;
    factors(t, &b, &r, &c);
    return t->ndim >= 2 ? (size_t)(b * (r + c)) : (size_t)t->numel;
}

void tg_adafactor_init(tg_adafactor *o, const tg_params *P, float beta1, float weight_decay) {
    memset(o, 0, sizeof *o);
    if (!P->allocated)
        tg_fail_h(&P->err, "tg_adafactor_init: parameters not allocated (call tg_params_alloc first)");
    if (!(beta1 >= 0.0f && beta1 < 1.0f))
        tg_fail_h(&P->err, "tg_adafactor_init: beta1 %g outside [0, 1)", beta1);
    if (!(weight_decay >= 0.0f && isfinite(weight_decay)))
        tg_fail_h(&P->err, "tg_adafactor_init: weight_decay %g must be finite and >= 0", weight_decay);
    o->beta1 = beta1, o->weight_decay = weight_decay;
    o->decay = 0.8f, o->eps1 = 1e-30f, o->eps2 = 1e-3f, o->clip_threshold = 1.0f, o->scale_parameter = 1;
    o->n = P->numel, o->n_params = P->n;
    size_t largest = 1;
    o->v_off = calloc((size_t)P->n + 1, sizeof *o->v_off);
    if (!o->v_off) tg_fail_h(&P->err, "tg_adafactor_init: out of memory for %d parameters", P->n);
    for (int p = 0; p < P->n; p++) {
        o->v_off[p + 1] = o->v_off[p] + tg_adafactor_state_size(P->list[p]);
        if ((size_t)P->list[p]->numel > largest) largest = (size_t)P->list[p]->numel;
    }
    o->n_v = o->v_off[P->n];
    o->v = calloc(o->n_v ? o->n_v : 1, sizeof(float));
    o->u = malloc(largest * sizeof(float));
    o->m = beta1 > 0.0f ? calloc(o->n ? o->n : 1, sizeof(float)) : NULL;
    if (!o->v || !o->u || (beta1 > 0.0f && !o->m)) {
        tg_adafactor_free(o);
        tg_fail_h(&P->err, "tg_adafactor_init: out of memory for %zu parameter floats", P->numel);
    }
}

/* U = G / sqrt(V) for one parameter into u, its state v updated with β2t; returns Σ U² (double). */
static double second_moment(const tg_tensor *t, const float *g, float *v, float *u, double b2, double eps1) {
    int64_t nb, r, c;
    factors(t, &nb, &r, &c);
    double ss = 0;
    if (t->ndim < 2) {
        for (int64_t i = 0; i < t->numel; i++) {
            v[i] = (float)(b2 * v[i] + (1 - b2) * ((double)g[i] * g[i] + eps1));
            u[i] = (float)(g[i] / sqrt((double)v[i]));
            ss += (double)u[i] * u[i];
        }
        return ss;
    }
    for (int64_t b = 0; b < nb; b++) {
        const float *gb = g + b * r * c;
        float *R = v + b * (r + c), *C = R + r, *ub = u + b * r * c;
        double rmean = 0;
        for (int64_t i = 0; i < r; i++) {   /* R_i: the mean over the row of G² + eps1 */
            double s = 0;
            for (int64_t j = 0; j < c; j++) s += (double)gb[i * c + j] * gb[i * c + j] + eps1;
            R[i] = (float)(b2 * R[i] + (1 - b2) * (s / (double)c));
            rmean += R[i];
        }
        rmean /= (double)r;
        for (int64_t j = 0; j < c; j++) {   /* C_j: the mean over the column */
            double s = 0;
            for (int64_t i = 0; i < r; i++) s += (double)gb[i * c + j] * gb[i * c + j] + eps1;
            C[j] = (float)(b2 * C[j] + (1 - b2) * (s / (double)r));
        }
        /* V_ij = R_i C_j / mean(R): the rank-1 fit of G²'s running mean that keeps its row and column sums */
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) {
                double vij = (double)R[i] * C[j] / rmean;
                ub[i * c + j] = (float)(gb[i * c + j] / sqrt(vij));
                ss += (double)ub[i * c + j] * ub[i * c + j];
            }
    }
    return ss;
}

void tg_adafactor_step(tg_adafactor *o, tg_params *P, float lr) {
    if (!(lr >= 0.0f && isfinite(lr)))
        tg_fail_h(&P->err, "tg_adafactor_step: lr %g must be finite and >= 0", lr);
    if (!o->v || !o->v_off)
        tg_fail_h(&P->err, "tg_adafactor_step: optimizer has no state (freed, or never initialised)");
    if (o->n != P->numel || !P->allocated || o->n_params != P->n)
        tg_fail_h(&P->err, "tg_adafactor_step: optimizer made for %d parameters of %zu floats, there are %d of %zu%s",
                  o->n_params, o->n, P->n, P->numel, P->allocated ? "" : " (not allocated)");
    if (!(o->decay > 0.0f && o->decay <= 1.0f))
        tg_fail_h(&P->err, "tg_adafactor_step: decay %g outside (0, 1]", o->decay);
    if (!(o->eps1 >= 0.0f && isfinite(o->eps1)) || !(o->eps2 >= 0.0f && isfinite(o->eps2)))
        tg_fail_h(&P->err, "tg_adafactor_step: eps1 %g and eps2 %g must be finite and >= 0", o->eps1, o->eps2);
    if (!(o->clip_threshold > 0.0f))
        tg_fail_h(&P->err, "tg_adafactor_step: clip_threshold %g must be > 0 (inf: no update clipping)",
                  o->clip_threshold);
    for (int p = 0; p < P->n; p++) {
        if (!(P->list[p]->lr_mult >= 0.0f && isfinite(P->list[p]->lr_mult)))
            tg_fail_h(&P->err, "tg_adafactor_step: parameter '%s' has lr_mult %g; it must be finite and >= 0",
                      P->list[p]->name, P->list[p]->lr_mult);
        if (o->v_off[p + 1] - o->v_off[p] != tg_adafactor_state_size(P->list[p]))
            tg_fail_h(&P->err, "tg_adafactor_step: parameter '%s' has another shape than the optimizer was made for",
                      P->list[p]->name);
    }
    o->t++;
    const double b2 = 1.0 - pow((double)o->t, -(double)o->decay);   /* 0 at t = 1: V starts as G² */
    for (int p = 0; p < P->n; p++) {
        const tg_tensor *t = P->list[p];
        const size_t lo = (size_t)(t->data - P->data), n = (size_t)t->numel;
        if (!n) continue;
        float *w = P->data + lo, *u = o->u;
        const float *g = P->grad + lo;
        double ss = second_moment(t, g, o->v + o->v_off[p], u, b2, o->eps1);
        double rms_u = sqrt(ss / (double)n), clip = rms_u / o->clip_threshold > 1.0 ? rms_u / o->clip_threshold : 1.0;
        double ww = 0;
        for (size_t i = 0; i < n; i++) ww += (double)w[i] * w[i];
        const double rho = (double)lr * t->lr_mult, rms_w = sqrt(ww / (double)n);
        const double alpha = o->scale_parameter ? rho * (rms_w > o->eps2 ? rms_w : o->eps2) : rho;
        const float keep = t->decay ? (float)(1.0 - rho * o->weight_decay) : 1.0f;
        float *m = o->m ? o->m + lo : NULL;
        for (size_t i = 0; i < n; i++) {
            float ui = (float)(u[i] / clip);
            if (m) ui = m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * ui;
            w[i] = w[i] * keep - (float)(alpha * ui);
        }
    }
}

void tg_adafactor_free(tg_adafactor *o) {
    free(o->v);
    free(o->m);
    free(o->u);
    free(o->v_off);
    memset(o, 0, sizeof *o);
}
