#include "gelu.h"

#include "gelu_vec.h"
#include "parallel.h"

enum { CHUNK = 1 << 14 };   /* elements per parallel work item */

typedef struct { const tg_gelu_ops *v; const float *x, *g; float *y; int64_t n; int first; } gelu_job;

/* backward recomputes tanh from x rather than saving it: cheaper than numel
 * more floats of arena per gelu */
static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    /* nothing wrote dx yet: write, not add */
    j->v->bwd(j->x + lo, NULL, j->g + lo, j->y + lo, NULL, hi - lo, !j->first);
}

static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    j->v->fwd(j->x + lo, NULL, j->y + lo, hi - lo);
}

static int parts(int64_t n) { return (int)((n + CHUNK - 1) / CHUNK); }

static void gelu_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    gelu_job j = { tg_gelu_ops_for(0), x->data, n->out->grad, x->grad, x->numel, tg_grad_first(x) };
    tg_parallel_for(parts(x->numel), TG_WORK_COPY * x->numel, backward_part, &j);
}

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    gelu_job j = { tg_gelu_ops_for(0), x->data, NULL, y->data, x->numel, 0 };
    tg_parallel_for(parts(x->numel), TG_WORK_COPY * x->numel, forward_part, &j);
    tg_node *n = tg_record(ctx, "tg_gelu", gelu_backward, y, 1, (tg_tensor *[]){x}, 0);
    if (n) n->own_grads = 1;
    return y;
}
