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

/* A part's rows go in blocks of BLOCK, each pass over the block's rows before
 * the next: the rows' maxima and sums are independent work the core overlaps,
 * where row by row each waited on the last one's horizontal reduction (GCC
 * folds an omp-simd reduction's lanes one at a time through memory). The max
 * is vmath.h's, folded in registers; a max is the same whatever the order.
 * Each row's sum, and the order the loss is summed in, are as row by row:
 * the same bits as 0.19.1 (1.9× faster at V 64, AMD EPYC Zen 5, AVX-512:
 * docs/speed.md, "Cross-entropy's rows in blocks"). */
enum { BLOCK = 16 };

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const ce_job *j = arg;
    int V = j->r->V;
    int64_t lo = (int64_t)part * ROWS, hi = lo + ROWS < j->r->rows ? lo + ROWS : j->r->rows;
    double loss = 0;
    for (int64_t p0 = lo; p0 < hi; p0 += BLOCK) {
        int n = hi - p0 < BLOCK ? (int)(hi - p0) : BLOCK;
        float mx[BLOCK];
        double s[BLOCK];
        for (int b = 0; b < n; b++)   /* an ignored row: nothing to compute */
            mx[b] = j->targets[p0 + b] == -1 ? 0 : tg_row_max(j->logits + (p0 + b) * V, V);
        for (int b = 0; b < n; b++) {
            s[b] = 1;
            if (j->targets[p0 + b] == -1) continue;
            const float *l = j->logits + (p0 + b) * V;
            float m = mx[b];
            double sum = 0;   /* terms in (0, 1]: a double sum of them loses nothing */
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < V; c++) sum += tg_exp_neg(l[c] - m);
            s[b] = sum;
        }
        for (int b = 0; b < n; b++) {
            int64_t p = p0 + b;
            if (j->targets[p] == -1) continue;
            double lp = mx[b] + log(s[b]);
            j->lse[p] = (float)lp;
            loss += lp - j->logits[p * V + j->targets[p]];
        }
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
