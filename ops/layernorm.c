#include "layernorm.h"

#include <math.h>

#include "parallel.h"

typedef struct { int64_t rows; int D; float *mean, *rstd; } layernorm_rec;

/* Rows are split into parts of whole rows; gain and bias grads, sums over
 * rows, are summed a part at a time and the parts added in order. A missing
 * gain or bias is read as ones or zeros, so the loops have no branches and
 * vectorise. */
typedef struct {
    const layernorm_rec *r;
    const float *x, *dy, *gain, *bias;
    float *y, *mean, *rstd, *dx;
    float *dg_parts, *db_parts;   /* [parts, D] each, or NULL */
    int64_t rows_per_part;
    float eps;
    int dx_first;   /* nothing wrote dx yet: write, not add */
} ln_job;

TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const ln_job *jb = arg;
    const layernorm_rec *r = jb->r;
    int D = r->D;
    int64_t lo = part * jb->rows_per_part, hi = lo + jb->rows_per_part < r->rows ? lo + jb->rows_per_part : r->rows;
    float *dg = jb->dg_parts + (int64_t)part * D, *db = jb->db_parts + (int64_t)part * D;
    for (int j = 0; j < D; j++) dg[j] = db[j] = 0;
    const float *gain = jb->gain;
    for (int64_t i = lo; i < hi; i++) {
        const float *xr = jb->x + i * D, *dy = jb->dy + i * D;
        float mu = r->mean[i], rs = r->rstd[i];
        double sg = 0, sgx = 0;   /* Σ ĝ and Σ ĝ·x̂ */
#pragma omp simd reduction(+ : sg, sgx)
        for (int j = 0; j < D; j++) {
            float xh = (xr[j] - mu) * rs;
            float gh = dy[j] * gain[j];
            sg += gh;
            sgx += gh * xh;
            dg[j] += dy[j] * xh;
            db[j] += dy[j];
        }
        if (!jb->dx) continue;
        float mg = (float)(sg / D), mgx = (float)(sgx / D);
        float *dx = jb->dx + i * D;
        if (jb->dx_first) {
#pragma omp simd
            for (int j = 0; j < D; j++) dx[j] = rs * (dy[j] * gain[j] - mg - (xr[j] - mu) * rs * mgx);
        } else {
#pragma omp simd
            for (int j = 0; j < D; j++) dx[j] += rs * (dy[j] * gain[j] - mg - (xr[j] - mu) * rs * mgx);
        }
    }
}

static int64_t rows_per_part(int D) { return (TG_PART + D - 1) / D; }

static const float *filled(tg_ctx *ctx, int D, float v) {
    float *a = tg_arena_alloc(ctx, (size_t)D * sizeof(float));
    for (int j = 0; j < D; j++) a[j] = v;
    return a;
}

static void layernorm_backward(tg_ctx *ctx, const tg_node *n) {
    const layernorm_rec *r = n->saved;
    tg_tensor *x = n->in[0], *gain = n->in[1], *bias = n->in[2];
    int D = r->D;
    ln_job jb = { .r = r, .x = x->data, .dy = n->out->grad, .gain = gain ? gain->data : filled(ctx, D, 1.0f),
                  .dx = x->grad, .rows_per_part = rows_per_part(D), .dx_first = x->grad && tg_grad_first(x) };
    if (gain && gain->grad) tg_grad_acc(gain);
    if (bias && bias->grad) tg_grad_acc(bias);
    int parts = tg_parts(r->rows, jb.rows_per_part);
    jb.dg_parts = tg_arena_alloc(ctx, (size_t)parts * D * sizeof(float));
    jb.db_parts = tg_arena_alloc(ctx, (size_t)parts * D * sizeof(float));
    tg_parallel_for(parts, TG_WORK_NORM * r->rows * D, backward_part, &jb);
    for (int p = 0; p < parts; p++)
        for (int j = 0; j < D; j++) {
            if (gain && gain->grad) gain->grad[j] += jb.dg_parts[(int64_t)p * D + j];
            if (bias && bias->grad) bias->grad[j] += jb.db_parts[(int64_t)p * D + j];
        }
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const ln_job *jb = arg;
    const layernorm_rec *r = jb->r;
    int D = r->D;
    int64_t lo = part * jb->rows_per_part, hi = lo + jb->rows_per_part < r->rows ? lo + jb->rows_per_part : r->rows;
    for (int64_t i = lo; i < hi; i++) {
        const float *xr = jb->x + i * D;
        float *yr = jb->y + i * D;
        double s = 0, ss = 0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < D; j++) s += xr[j];
        double mu = s / D;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < D; j++) ss += (xr[j] - mu) * (xr[j] - mu);   /* two-pass: no cancellation */
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / D + jb->eps));
        jb->mean[i] = m;
        jb->rstd[i] = rs;
#pragma omp simd
        for (int j = 0; j < D; j++) {
            yr[j] = (xr[j] - m) * rs * jb->gain[j] + jb->bias[j];
        }
    }
}

tg_tensor *tg_layernorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gain, tg_tensor *bias, float eps) {
    int D = x->shape[x->ndim - 1];
    if (gain && (gain->ndim != 1 || gain->shape[0] != D))
        tg_fail(ctx, "tg_layernorm: gain %s does not match x %s: it must be [%d]", TG_SHAPE(gain),
                TG_SHAPE(x), D);
    if (bias && (bias->ndim != 1 || bias->shape[0] != D))
        tg_fail(ctx, "tg_layernorm: bias %s does not match x %s: it must be [%d]", TG_SHAPE(bias),
                TG_SHAPE(x), D);
    if (!(eps >= 0))
        tg_fail(ctx, "tg_layernorm: eps is %g for x %s; it must be >= 0", (double)eps, TG_SHAPE(x));
    int64_t rows = x->numel / D;
    tg_tensor *y = tg_new_like(ctx, x);
    /* saved always: two floats a row is cheap, and recording is decided after the output exists */
    float *mean = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));
    float *rstd = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));
    layernorm_rec rec = { .rows = rows, .D = D, .mean = mean, .rstd = rstd };
    ln_job jb = { .r = &rec, .x = x->data, .gain = gain ? gain->data : filled(ctx, D, 1.0f),
                  .bias = bias ? bias->data : filled(ctx, D, 0.0f),
                  .y = y->data, .mean = mean, .rstd = rstd, .rows_per_part = rows_per_part(D), .eps = eps };
    tg_parallel_for(tg_parts(rows, jb.rows_per_part), TG_WORK_NORM * rows * D, forward_part, &jb);
    tg_node *n = tg_record(ctx, "tg_layernorm", layernorm_backward, y, 3, (tg_tensor *[]){x, gain, bias},
                           sizeof(layernorm_rec));
    if (n) {
        *(layernorm_rec *)n->saved = rec;
        n->own_grads = 1;
    }
    return y;
}
