/* Global gradient norm and clipping: one loop over the flat grad buffer. */
#include "tg_optim.h"

#include <math.h>

#include "parallel.h"

typedef struct { float *g; size_t n, per_part; double *sums; float scale; } clip_job;

TG_VEC_CLONES static void sumsq_part(void *arg, int part, int thread) {
    (void)thread;
    clip_job *j = arg;
    size_t lo = (size_t)part * j->per_part, hi = lo + j->per_part < j->n ? lo + j->per_part : j->n;
    double s = 0.0;   /* double: millions of float squares lose digits in a float sum */
    const float *g = j->g;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
    j->sums[part] = s;
}

TG_VEC_CLONES static void scale_part(void *arg, int part, int thread) {
    (void)thread;
    clip_job *j = arg;
    size_t lo = (size_t)part * TG_PART, hi = lo + TG_PART < j->n ? lo + TG_PART : j->n;
    float *g = j->g, scale = j->scale;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) g[i] *= scale;
}

/* Partial sums over at most 256 parts (of TG_PART floats or more), added in
 * part order: the same norm for any thread count. */
float tg_grad_norm(const tg_params *P) {
    double sums[256];
    size_t per_part = (P->numel + 255) / 256;
    clip_job j = { P->grad, P->numel, per_part > TG_PART ? per_part : TG_PART, sums, 1.0f };
    int parts = tg_parts((int64_t)P->numel, (int64_t)j.per_part);
    tg_parallel_for(parts, TG_WORK_COPY * (int64_t)P->numel, sumsq_part, &j);
    double s = 0.0;
    for (int p = 0; p < parts; p++) s += sums[p];
    return (float)sqrt(s);
}

float tg_clip_grad_norm(tg_params *P, float max_norm) {
    if (isnan(max_norm))
        tg_fail_h(&P->err, "tg_clip_grad_norm: max_norm is NaN (use a value <= 0 for no clipping)");
    float norm = tg_grad_norm(P);
    if (max_norm > 0.0f && isfinite(norm) && norm > max_norm) {
        clip_job j = { P->grad, P->numel, 0, NULL, (float)(max_norm / ((double)norm + 1e-6)) };
        tg_parallel_for(tg_parts((int64_t)P->numel, TG_PART), TG_WORK_COPY * (int64_t)P->numel, scale_part, &j);
    }
    return norm;
}
