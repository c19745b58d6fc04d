/* AdamW over the flat parameter buffers, with PyTorch's update order. */
#include "tg_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

void tg_adamw_init(tg_adamw *o, const tg_params *P, float beta1, float beta2, float eps,
                   float weight_decay) {
    memset(o, 0, sizeof *o);
    if (!P->allocated)
        tg_fail_h(&P->err, "tg_adamw_init: parameters not allocated (call tg_params_alloc first)");
    /* written as !(x in range) so that NaN fails too */
    if (!(beta1 >= 0.0f && beta1 < 1.0f))
        tg_fail_h(&P->err, "tg_adamw_init: beta1 %g outside [0, 1)", beta1);
    if (!(beta2 >= 0.0f && beta2 < 1.0f))
        tg_fail_h(&P->err, "tg_adamw_init: beta2 %g outside [0, 1)", beta2);
    if (!(eps > 0.0f && isfinite(eps)))
        tg_fail_h(&P->err, "tg_adamw_init: eps %g must be finite and > 0", eps);
    if (!(weight_decay >= 0.0f && isfinite(weight_decay)))
        tg_fail_h(&P->err, "tg_adamw_init: weight_decay %g must be finite and >= 0", weight_decay);
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->n = P->numel;
    size_t n = o->n ? o->n : 1;
    o->m = calloc(n, sizeof(float));
    o->v = calloc(n, sizeof(float));
    o->n_params = P->n;
    o->keep = calloc(P->n ? (size_t)P->n : 1, sizeof(float));
    o->step_size = calloc(P->n ? (size_t)P->n : 1, sizeof(float));
    if (!o->m || !o->v || !o->keep || !o->step_size) {
        tg_adamw_free(o);
        tg_fail_h(&P->err, "tg_adamw_init: out of memory for %zu parameters", n);
    }
}

typedef struct {
    const tg_params *P;
    float *m, *v;
    const float *keep, *step_size;   /* per parameter */
    float b1, b2, eps, bc2_sqrt;
    size_t n;
} adam_job;

/* One parameter's elements [lo, hi) of the flat buffers. keep is 1 for a
 * parameter without decay, and w·1 is w exactly. Vectorised only because this
 * file is built with -fno-math-errno (optim/CMakeLists.txt): with errno, GCC
 * keeps every sqrtf a call. */
TG_VEC_CLONES static void adam_range(const adam_job *j, size_t lo, size_t hi, float keep, float step_size) {
    float *w = j->P->data, *m = j->m, *v = j->v;
    const float *g = j->P->grad;
    const float b1 = j->b1, b2 = j->b2, bc2_sqrt = j->bc2_sqrt, eps = j->eps;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
        float wi = w[i] * keep;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] = wi - step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
    }
}

static size_t offset_of(const tg_params *P, int p) { return (size_t)(P->list[p]->data - P->data); }

/* A fixed-size part of the flat buffers, cut where parameters begin. */
static void adam_part(void *arg, int part, int thread) {
    (void)thread;
    const adam_job *j = arg;
    const tg_params *P = j->P;
    size_t lo = (size_t)part * TG_PART, hi = lo + TG_PART < j->n ? lo + TG_PART : j->n;
    int a = 0, b = P->n - 1;   /* the parameter holding element lo: the last one starting at or before it */
    while (a < b) {
        int mid = (a + b + 1) / 2;
        if (offset_of(P, mid) <= lo) a = mid;
        else b = mid - 1;
    }
    for (int p = a; p < P->n && offset_of(P, p) < hi; p++) {
        size_t s = offset_of(P, p), e = s + (size_t)P->list[p]->numel;
        adam_range(j, s > lo ? s : lo, e < hi ? e : hi, j->keep[p], j->step_size[p]);
    }
}

void tg_adamw_step(tg_adamw *o, tg_params *P, float lr) {
    if (!(lr >= 0.0f && isfinite(lr)))
        tg_fail_h(&P->err, "tg_adamw_step: lr %g must be finite and >= 0", lr);
    if (!o->m)
        tg_fail_h(&P->err, "tg_adamw_step: optimizer has no state (freed, or never initialised)");
    if (o->n != P->numel || !P->allocated)
        tg_fail_h(&P->err, "tg_adamw_step: optimizer made for %zu parameter floats, the parameters have %zu%s",
                  o->n, P->numel, P->allocated ? "" : " (not allocated)");
    if (o->n_params != P->n)
        tg_fail_h(&P->err, "tg_adamw_step: optimizer made for %d parameters, there are %d", o->n_params, P->n);
    for (int p = 0; p < P->n; p++)
        if (!(P->list[p]->lr_mult >= 0.0f && isfinite(P->list[p]->lr_mult)))
            tg_fail_h(&P->err, "tg_adamw_step: parameter '%s' has lr_mult %g; it must be finite and >= 0",
                      P->list[p]->name, P->list[p]->lr_mult);
    o->t++;
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    const double bc1 = 1.0 - pow(b1, (double)o->t);
    for (int p = 0; p < P->n; p++) {
        const double lr_p = (double)lr * P->list[p]->lr_mult;
        o->keep[p] = P->list[p]->decay ? (float)(1.0 - lr_p * o->weight_decay) : 1.0f;   /* w *= keep */
        o->step_size[p] = (float)(lr_p / bc1);
    }
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)o->t));
    adam_job j = { P, o->m, o->v, o->keep, o->step_size, b1, b2, eps, bc2_sqrt, o->n };
    tg_parallel_for(tg_parts((int64_t)o->n, TG_PART), TG_WORK_NORM * (int64_t)o->n, adam_part, &j);
}

void tg_adamw_free(tg_adamw *o) {
    free(o->m);
    free(o->v);
    free(o->keep);
    free(o->step_size);
    memset(o, 0, sizeof *o);
}
