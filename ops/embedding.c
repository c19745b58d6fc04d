#include "embedding.h"

#include <string.h>

typedef struct { int n, D; int *idx; } embedding_rec;

static void embedding_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const embedding_rec *r = n->saved;
    tg_tensor *table = n->in[0];
    if (!table->grad) return;
    int D = r->D;
    const float *g = n->out->grad;
    for (int p = 0; p < r->n; p++) {
        float *dst = table->grad + (int64_t)r->idx[p] * D;
        const float *src = g + (int64_t)p * D;
        for (int j = 0; j < D; j++) dst[j] += src[j];
    }
}

tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *table, const int *idx, int B, int T) {
    if (table->ndim != 2)
        tg_fail(ctx, "tg_embedding: the table must be [V, D], got %s", TG_SHAPE(table));
    if (B <= 0 || T <= 0)
        tg_fail(ctx, "tg_embedding: B = %d, T = %d for table %s; both must be positive", B, T,
                TG_SHAPE(table));
    int V = table->shape[0], D = table->shape[1], n = B * T;
    for (int p = 0; p < n; p++)
        if (idx[p] < 0 || idx[p] >= V)
            tg_fail(ctx, "tg_embedding: index %d at position %d (b=%d, t=%d) is outside [0, %d) for table %s",
                    idx[p], p, p / T, p % T, V, TG_SHAPE(table));
    tg_tensor *out = tg_new(ctx, 3, (int[]){B, T, D});
    for (int p = 0; p < n; p++)
        memcpy(out->data + (int64_t)p * D, table->data + (int64_t)idx[p] * D, (size_t)D * sizeof(float));
    tg_node *nd = tg_record(ctx, "tg_embedding", embedding_backward, out, 1, (tg_tensor *[]){table},
                            sizeof(embedding_rec));
    if (nd) {
        embedding_rec *r = nd->saved;
        r->n = n;
        r->D = D;
        r->idx = tg_arena_alloc(ctx, (size_t)n * sizeof(int));
        memcpy(r->idx, idx, (size_t)n * sizeof(int));
    }
    return out;
}
