#include "sum.h"

static void sum_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    float g = n->out->grad[0];
    if (x->grad)
        for (int64_t i = 0; i < x->numel; i++) x->grad[i] += g;
}

tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x) {
    double s = 0;   /* float accumulation loses digits once numel reaches ~1e5 */
    for (int64_t i = 0; i < x->numel; i++) s += x->data[i];
    tg_tensor *out = tg_new(ctx, 1, (int[]){1});
    out->data[0] = (float)s;
    tg_record(ctx, "tg_sum", sum_backward, out, 1, (tg_tensor *[]){x}, 0);
    return out;
}
