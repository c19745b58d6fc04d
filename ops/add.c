#include "add.h"

#include <string.h>

#include "parallel.h"

/* b's shape equals a's trailing dimensions, so b's element for a's flat index
 * i is i % nb: no stride bookkeeping needed. Parts are whole repeats of b
 * (at least TG_PART elements), so a part adds b to its own rows. */
typedef struct {
    const float *a, *b, *g;
    float *out, *da, *db_parts;   /* db_parts: one nb-long partial sum a part */
    float *db;                    /* b of a's shape: its grad, element-wise like da's */
    int da_first, db_first;       /* grads nothing wrote yet: copied into, not added to */
    int64_t na, nb, span;         /* span: elements a part */
} add_job;

/* dx (+)= g over [lo, hi) */
static inline void pass_grad(float *dx, const float *g, int64_t lo, int64_t hi, int first) {
    if (first) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] = g[i];
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] += g[i];
    }
}

static void range(const add_job *j, int part, int64_t *lo, int64_t *hi) {
    *lo = part * j->span;
    *hi = *lo + j->span < j->na ? *lo + j->span : j->na;
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const add_job *j = arg;
    int64_t lo, hi;
    range(j, part, &lo, &hi);
    for (int64_t r = lo; r < hi; r += j->nb) {
        float *out = j->out + r;
        const float *a = j->a + r, *b = j->b;
#pragma omp simd
        for (int64_t c = 0; c < j->nb; c++) out[c] = a[c] + b[c];
    }
}

TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const add_job *j = arg;
    int64_t lo, hi;
    range(j, part, &lo, &hi);
    const float *g = j->g;
    if (j->da) pass_grad(j->da, g, lo, hi, j->da_first);
    if (j->db) pass_grad(j->db, g, lo, hi, j->db_first);
    if (j->db_parts) {
        float *db = j->db_parts + part * j->nb;
        memset(db, 0, (size_t)j->nb * sizeof(float));
        for (int64_t r = lo; r < hi; r += j->nb)
#pragma omp simd
            for (int64_t c = 0; c < j->nb; c++) db[c] += g[r + c];
    }
}

static add_job make_job(const tg_tensor *a, const tg_tensor *b) {
    add_job j = { .na = a->numel, .nb = b->numel };
    j.span = (TG_PART + j.nb - 1) / j.nb * j.nb;
    return j;
}

static void add_backward(tg_ctx *ctx, const tg_node *n) {
    tg_tensor *a = n->in[0], *b = n->in[1];
    add_job j = make_job(a, b);
    j.g = n->out->grad;
    j.da = a->grad;
    if (a->grad) j.da_first = tg_grad_first(a);
    if (b->grad && j.nb == j.na) {   /* a residual: b's grad is g, like a's, in parts of TG_PART */
        j.db = b->grad;
        j.db_first = tg_grad_first(b);
        j.span = TG_PART;
    }
    int parts = tg_parts(j.na, j.span);
    if (b->grad && !j.db) {
        tg_grad_acc(b);
        j.db_parts = tg_arena_alloc(ctx, (size_t)parts * j.nb * sizeof(float));
    }
    tg_parallel_for(parts, TG_WORK_COPY * j.na, backward_part, &j);
    if (j.db_parts)   /* the parts' sums, added in part order */
        for (int p = 0; p < parts; p++)
            for (int64_t c = 0; c < j.nb; c++) b->grad[c] += j.db_parts[p * j.nb + c];
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (!tg_is_trailing_shape(a, b))
        tg_fail(ctx, "tg_add: %s + %s: b must have a's shape or a's trailing dimensions", TG_SHAPE(a),
                TG_SHAPE(b));
    tg_tensor *out = tg_new_like(ctx, a);
    add_job j = make_job(a, b);
    j.a = a->data;
    j.b = b->data;
    j.out = out->data;
    tg_parallel_for(tg_parts(j.na, j.span), TG_WORK_COPY * j.na, forward_part, &j);
    tg_node *n = tg_record(ctx, "tg_add", add_backward, out, 2, (tg_tensor *[]){a, b}, 0);
    if (n) n->own_grads = 1;
    return out;
}
