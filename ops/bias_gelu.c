#include "bias_gelu.h"

#include <string.h>

#include "parallel.h"
#include "vmath.h"

/* Parts of whole rows, as tg_add splits a bias add (TG_PART elements or a
 * row), so db sums the rows in the same order as tg_add would: the same bits
 * as tg_gelu(tg_add(x, b)). Backward recomputes u = x + b. */
typedef struct {
    const float *x, *b, *g;
    float *y, *dx, *db_parts;   /* db_parts: one D-long partial sum a part */
    int64_t rows, rows_per_part;
    int D, dx_first;
} bg_job;

static void rows_of(const bg_job *j, int part, int64_t *lo, int64_t *hi) {
    *lo = part * j->rows_per_part;
    *hi = *lo + j->rows_per_part < j->rows ? *lo + j->rows_per_part : j->rows;
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const bg_job *j = arg;
    int64_t lo, hi;
    rows_of(j, part, &lo, &hi);
    const int D = j->D;
    const float *b = j->b;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * D;
        float *y = j->y + r * D;
#pragma omp simd
        for (int c = 0; c < D; c++) y[c] = tg_gelu_f(x[c] + b[c]);
    }
}

TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const bg_job *j = arg;
    int64_t lo, hi;
    rows_of(j, part, &lo, &hi);
    const int D = j->D;
    const float *b = j->b;
    float *db = j->db_parts ? j->db_parts + (int64_t)part * D : NULL;
    if (db) memset(db, 0, (size_t)D * sizeof(float));
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * D, *g = j->g + r * D;
        float *dx = j->dx ? j->dx + r * D : NULL;
        if (dx && j->dx_first) {   /* nothing wrote dx yet: write it */
#pragma omp simd
            for (int c = 0; c < D; c++) dx[c] = g[c] * tg_gelu_grad_f(x[c] + b[c]);
        } else if (dx) {
#pragma omp simd
            for (int c = 0; c < D; c++) dx[c] += g[c] * tg_gelu_grad_f(x[c] + b[c]);
        }
        if (!db) continue;
        if (dx && j->dx_first) {   /* dx holds exactly this row's du */
#pragma omp simd
            for (int c = 0; c < D; c++) db[c] += dx[c];
        } else {
#pragma omp simd
            for (int c = 0; c < D; c++) db[c] += g[c] * tg_gelu_grad_f(x[c] + b[c]);
        }
    }
}

static bg_job make_job(const tg_tensor *x) {
    bg_job j = { .D = x->shape[x->ndim - 1] };
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
