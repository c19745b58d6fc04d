#include "bias_gelu.h"

#include <string.h>

#include "gelu_vec.h"
#include "parallel.h"

/* Parts of whole rows, as tg_add splits a bias add (TG_PART elements or a
 * row), so db sums the rows in the same order as tg_add would: the same bits
 * as tg_gelu(tg_add(x, b)). Backward recomputes u = x + b. */
typedef struct {
    const tg_gelu_ops *v;
    const float *x, *b, *g;
    float *y, *dx, *db_parts;   /* db_parts: one D-long partial sum a part */
    int64_t rows, rows_per_part;
    int D, dx_first;
} bg_job;

static void rows_of(const bg_job *j, int part, int64_t *lo, int64_t *hi) {
    *lo = part * j->rows_per_part;
    *hi = *lo + j->rows_per_part < j->rows ? *lo + j->rows_per_part : j->rows;
}

static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const bg_job *j = arg;
    int64_t lo, hi;
    rows_of(j, part, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) j->v->fwd(j->x + r * j->D, j->b, j->y + r * j->D, j->D);
}

/* du = g ⊙ gelu'(x + b) into dx (written when nothing wrote it yet, else added)
 * and added to the part's db, a row at a time in row order */
static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const bg_job *j = arg;
    int64_t lo, hi;
    rows_of(j, part, &lo, &hi);
    const int D = j->D;
    float *db = j->db_parts ? j->db_parts + (int64_t)part * D : NULL;
    if (db) memset(db, 0, (size_t)D * sizeof(float));
    for (int64_t r = lo; r < hi; r++)
        j->v->bwd(j->x + r * D, j->b, j->g + r * D, j->dx ? j->dx + r * D : NULL, db, D, !j->dx_first);
}

static bg_job make_job(const tg_tensor *x) {
    bg_job j = { .v = tg_gelu_ops_for(0), .D = x->shape[x->ndim - 1] };
    j.rows = x->numel / j.D;
    j.rows_per_part = (TG_PART + j.D - 1) / j.D;
    return j;
}

static void bias_gelu_backward(tg_ctx *ctx, const tg_node *n) {
    tg_tensor *x = n->in[0], *b = n->in[1];
    bg_job j = make_job(x);
    int parts = tg_parts(j.rows, j.rows_per_part);
    j.x = x->data;
    j.b = b->data;
    j.g = n->out->grad;
    if (x->grad) {
        j.dx = x->grad;
        j.dx_first = tg_grad_first(x);
    }
    if (b->grad) {
        tg_grad_acc(b);
        j.db_parts = tg_arena_alloc(ctx, (size_t)parts * j.D * sizeof(float));
    }
    if (!j.dx && !j.db_parts) return;
    tg_parallel_for(parts, TG_WORK_COPY * x->numel, backward_part, &j);
    if (j.db_parts)   /* the parts' sums, added in part order */
        for (int p = 0; p < parts; p++)
            for (int c = 0; c < j.D; c++) b->grad[c] += j.db_parts[(int64_t)p * j.D + c];
}

tg_tensor *tg_bias_gelu(tg_ctx *ctx, tg_tensor *x, tg_tensor *b) {
    if (b->ndim != 1 || b->shape[0] != x->shape[x->ndim - 1])
        tg_fail(ctx, "tg_bias_gelu: bias %s does not match x %s: it must be [%d]", TG_SHAPE(b), TG_SHAPE(x),
                x->shape[x->ndim - 1]);
    tg_tensor *y = tg_new_like(ctx, x);
    bg_job j = make_job(x);
    j.x = x->data;
    j.b = b->data;
    j.y = y->data;
    tg_parallel_for(tg_parts(j.rows, j.rows_per_part), TG_WORK_COPY * x->numel, forward_part, &j);
    tg_node *n = tg_record(ctx, "tg_bias_gelu", bias_gelu_backward, y, 2, (tg_tensor *[]){x, b}, 0);
    if (n) n->own_grads = 1;
    return y;
}
