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
    o->decay = calloc(n, 1);
    if (!o->m || !o->v || !o->decay) {
        tg_adamw_free(o);
        tg_fail_h(&P->err, "tg_adamw_init: out of memory for %zu parameters", n);
    }
    for (int p = 0; p < P->n; p++) {
        const tg_tensor *t = P->list[p];
        memset(o->decay + (t->data - P->data), t->ndim >= 2, (size_t)t->numel);
    }
}

typedef struct {
    float *w, *m, *v;
    const float *g;
    const unsigned char *decay;
    float b1, b2, eps, keep, step_size, bc2_sqrt;
    size_t n;
} adam_job;

/* Vectorised only because this file is built with -fno-math-errno
 * (optim/CMakeLists.txt): with errno, GCC keeps every sqrtf a call. */
TG_VEC_CLONES static void adam_part(void *arg, int part, int thread) {
    (void)thread;
    const adam_job *j = arg;
    size_t lo = (size_t)part * TG_PART, hi = lo + TG_PART < j->n ? lo + TG_PART : j->n;
    float *w = j->w, *m = j->m, *v = j->v;
    const float *g = j->g;
    const unsigned char *decay = j->decay;
    const float b1 = j->b1, b2 = j->b2, keep = j->keep, step_size = j->step_size, bc2_sqrt = j->bc2_sqrt;
    const float eps = j->eps;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
        float wi = decay[i] ? w[i] * keep : w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] = wi - step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
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
    o->t++;
    const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    const float keep = (float)(1.0 - (double)lr * o->weight_decay);   /* decayed params: w *= keep */
    const float step_size = (float)(lr / (1.0 - pow(b1, (double)o->t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)o->t));
    adam_job j = { P->data, o->m, o->v, P->grad, o->decay, b1, b2, eps, keep, step_size, bc2_sqrt, o->n };
    tg_parallel_for(tg_parts((int64_t)o->n, TG_PART), 8 * (int64_t)o->n, adam_part, &j);
}

void tg_adamw_free(tg_adamw *o) {
    free(o->m);
    free(o->v);
    free(o->decay);
    memset(o, 0, sizeof *o);
}
