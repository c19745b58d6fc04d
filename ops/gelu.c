#include "gelu.h"

#include "parallel.h"
#include "vmath.h"

enum { CHUNK = 1 << 14 };   /* elements per parallel work item */

typedef struct { const float *x, *g; float *y; int64_t n; int first; } gelu_job;

/* backward recomputes tanh from x rather than saving it: cheaper than numel
 * more floats of arena per gelu */
TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    const float *x = j->x, *g = j->g;
    float *dx = j->y;
    if (j->first) {   /* nothing wrote dx yet: write, not add */
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] = g[i] * tg_gelu_grad_f(x[i]);
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] += g[i] * tg_gelu_grad_f(x[i]);
    }
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    const float *x = j->x;
    float *y = j->y;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) y[i] = tg_gelu_f(x[i]);
}

static int parts(int64_t n) { return (int)((n + CHUNK - 1) / CHUNK); }

static void gelu_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    gelu_job j = { x->data, n->out->grad, x->grad, x->numel, tg_grad_first(x) };
    tg_parallel_for(parts(x->numel), TG_WORK_COPY * x->numel, backward_part, &j);
}

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    gelu_job j = { x->data, NULL, y->data, x->numel, 0 };
    tg_parallel_for(parts(x->numel), TG_WORK_COPY * x->numel, forward_part, &j);
    tg_node *n = tg_record(ctx, "tg_gelu", gelu_backward, y, 1, (tg_tensor *[]){x}, 0);
    if (n) n->own_grads = 1;
    return y;
}
