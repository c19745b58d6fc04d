#include "mul.h"

/* As in tg_add, b's element for a's flat index i is i % nb. */
static void mul_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *a = n->in[0], *b = n->in[1];
    const float *g = n->out->grad;
    int64_t na = a->numel, nb = b->numel;
    for (int64_t r = 0; r < na; r += nb)
        for (int64_t j = 0; j < nb; j++) {
            if (a->grad) a->grad[r + j] += g[r + j] * b->data[j];
            if (b->grad) b->grad[j] += g[r + j] * a->data[r + j];
        }
}

tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b) {
    if (!tg_is_trailing_shape(a, b))
        tg_fail(ctx, "tg_mul: %s * %s: b must have a's shape or a's trailing dimensions", TG_SHAPE(a),
                TG_SHAPE(b));
    tg_tensor *out = tg_new_like(ctx, a);
    int64_t na = a->numel, nb = b->numel;
    for (int64_t r = 0; r < na; r += nb)
        for (int64_t j = 0; j < nb; j++) out->data[r + j] = a->data[r + j] * b->data[j];
    tg_record(ctx, "tg_mul", mul_backward, out, 2, (tg_tensor *[]){a, b}, 0);
    return out;
}
