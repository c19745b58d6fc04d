#include "cross_entropy.h"

#include <math.h>
#include <string.h>

/* lse[p] = log Σ exp(logits[p, :]) lets backward rebuild softmax as exp(l − lse)
 * from one float a row instead of saving all the probabilities. */
typedef struct { int64_t rows; int V, count; int *targets; float *lse; } ce_rec;

static void ce_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const ce_rec *r = n->saved;
    tg_tensor *logits = n->in[0];
    if (!logits->grad) return;
    int V = r->V;
    float g = (float)(n->out->grad[0] / r->count);
    for (int64_t p = 0; p < r->rows; p++) {
        int t = r->targets[p];
        if (t == -1) continue;
        const float *l = logits->data + p * V;
        float *dl = logits->grad + p * V;
        for (int j = 0; j < V; j++) dl[j] += g * expf(l[j] - r->lse[p]);
        dl[t] -= g;
    }
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
    double loss = 0;
    for (int64_t p = 0; p < rows; p++) {
        if (targets[p] == -1) continue;
        const float *l = logits->data + p * V;
        float mx = l[0];
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        double s = 0;
        for (int j = 0; j < V; j++) s += exp((double)l[j] - mx);
        double lp = mx + log(s);
        lse[p] = (float)lp;
        loss += lp - l[targets[p]];
    }
    tg_tensor *out = tg_new(ctx, 1, (int[]){1});
    out->data[0] = (float)(loss / count);
    tg_node *n = tg_record(ctx, "tg_cross_entropy", ce_backward, out, 1, (tg_tensor *[]){logits}, sizeof(ce_rec));
    if (n) {
        ce_rec *r = n->saved;
        *r = (ce_rec){ .rows = rows, .V = V, .count = count, .lse = lse };
        r->targets = tg_arena_alloc(ctx, (size_t)rows * sizeof(int));
        memcpy(r->targets, targets, (size_t)rows * sizeof(int));
    }
    return out;
}
