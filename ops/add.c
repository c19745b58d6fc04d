#include "add.h"

/* b's shape equals a's trailing dimensions, so b's element for a's flat index
 * i is i % nb: no stride bookkeeping needed. */
static void add_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *a = n->in[0], *b = n->in[1];
    const float *g = n->out->grad;
    int64_t na = a->numel, nb = b->numel;
    if (a->grad)
        for (int64_t i = 0; i < na; i++) a->grad[i] += g[i];
    if (b->grad)
        for (int64_t r = 0; r < na; r += nb)
            for (int64_t j = 0; j < nb; j++) b->grad[j] += g[r + j];
}

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    int fits = b->ndim <= a->ndim;
    for (int i = 0; fits && i < b->ndim; i++) fits = b->shape[i] == a->shape[a->ndim - b->ndim + i];
    if (!fits)
        tg_fail(ctx, "tg_add: %s + %s: b must have a's shape or a's trailing dimensions", TG_SHAPE(a),
                TG_SHAPE(b));
    tg_tensor *out = tg_new_like(ctx, a);
    int64_t na = a->numel, nb = b->numel;
    for (int64_t r = 0; r < na; r += nb)
        for (int64_t j = 0; j < nb; j++) out->data[r + j] = a->data[r + j] + b->data[j];
    tg_record(ctx, "tg_add", add_backward, out, 2, (tg_tensor *[]){a, b}, 0);
    return out;
}
