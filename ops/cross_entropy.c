#include "cross_entropy.h"

#include <math.h>
#include <string.h>

#include "parallel.h"
#include "vmath.h"

/* lse[p] = log Σ exp(logits[p, :]) lets backward rebuild softmax as exp(l − lse)
 * from one float a row instead of saving all the probabilities. */
typedef struct { int64_t rows; int V, count; int *targets; float *lse; } ce_rec;

typedef struct {
    const ce_rec *r;
    const float *logits;
    const int *targets;
    float *dlogits, *lse, g;
    double *loss_parts;
    int first;   /* nothing wrote dlogits yet: write, not add */
} ce_job;

enum { ROWS = 64 };   /* rows a part */

TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const ce_job *j = arg;
    const ce_rec *r = j->r;
    int V = r->V;
    int64_t lo = (int64_t)part * ROWS, hi = lo + ROWS < r->rows ? lo + ROWS : r->rows;
    for (int64_t p = lo; p < hi; p++) {
        int t = r->targets[p];
        const float *l = j->logits + p * V;
        float *dl = j->dlogits + p * V, L = r->lse[p];
        if (t == -1) {
            if (j->first) memset(dl, 0, (size_t)V * sizeof(float));
            continue;
        }
        const float g = j->g;
        if (j->first) {
#pragma omp simd
            for (int c = 0; c < V; c++) dl[c] = g * tg_exp_neg(l[c] - L);
        } else {
#pragma omp simd
            for (int c = 0; c < V; c++) dl[c] += g * tg_exp_neg(l[c] - L);
        }
        dl[t] -= j->g;
    }
}

static void ce_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const ce_rec *r = n->saved;
    tg_tensor *logits = n->in[0];
    if (!logits->grad) return;
    ce_job j = { .r = r, .logits = logits->data, .dlogits = logits->grad,
                 .g = (float)(n->out->grad[0] / r->count), .first = tg_grad_first(logits) };
    tg_parallel_for(tg_parts(r->rows, ROWS), TG_WORK_EXP * r->rows * r->V, backward_part, &j);
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const ce_job *j = arg;
    int V = j->r->V;
    int64_t lo = (int64_t)part * ROWS, hi = lo + ROWS < j->r->rows ? lo + ROWS : j->r->rows;
    double loss = 0;
    for (int64_t p = lo; p < hi; p++) {
        if (j->targets[p] == -1) continue;
        const float *l = j->logits + p * V;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < V; c++) mx = l[c] > mx ? l[c] : mx;
        double s = 0;   /* terms in (0, 1]: a double sum of them loses nothing */
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < V; c++) s += tg_exp_neg(l[c] - mx);
        double lp = mx + log(s);
        j->lse[p] = (float)lp;
        loss += lp - l[j->targets[p]];
    }
    j->loss_parts[part] = loss;
}

tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, const int *targets) {
    int V = logits->shape[logits->ndim - 1];
    int64_t rows = logits->numel / V;
    int count = 0;
    for (int64_t p = 0; p < rows; p++) {
        int t = targets[p];
        if (t == -1) continue;
        if (t < 0 || t >= V)
            tg_fail(ctx, "tg_cross_entropy: target %d at position %lld is outside [0, %d) (or -1 to ignore) for logits %s",
                    t, (long long)p, V, TG_SHAPE(logits));
        count++;
    }
    if (count == 0)
        tg_fail(ctx, "tg_cross_entropy: all %lld positions of logits %s are ignored (target -1): the mean is undefined",
                (long long)rows, TG_SHAPE(logits));
    float *lse = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));
    ce_rec rec = { .rows = rows, .V = V, .count = count, .lse = lse };
    int parts = tg_parts(rows, ROWS);
    ce_job j = { .r = &rec, .logits = logits->data, .targets = targets, .lse = lse,
                 .loss_parts = tg_arena_alloc(ctx, (size_t)parts * sizeof(double)) };
    tg_parallel_for(parts, TG_WORK_EXP * rows * V, forward_part, &j);
    double loss = 0;   /* the parts' sums in order */
    for (int p = 0; p < parts; p++) loss += j.loss_parts[p];
    tg_tensor *out = tg_new(ctx, 1, (int[]){1});
    out->data[0] = (float)(loss / count);
    tg_node *n = tg_record(ctx, "tg_cross_entropy", ce_backward, out, 1, (tg_tensor *[]){logits}, sizeof(ce_rec));
    if (n) {
        n->own_grads = 1;
        ce_rec *r = n->saved;
        *r = (ce_rec){ .rows = rows, .V = V, .count = count, .lse = lse };
        r->targets = tg_arena_alloc(ctx, (size_t)rows * sizeof(int));
        memcpy(r->targets, targets, (size_t)rows * sizeof(int));
    }
    return out;
}
