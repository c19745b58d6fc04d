#include "exp.h"

#include <math.h>

/* d e^a = e^a da: the output is the derivative, so nothing else is saved */
static void exp_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *a = n->in[0];
    const float *y = n->out->data, *g = n->out->grad;
    if (a->grad)
        for (int64_t i = 0; i < a->numel; i++) a->grad[i] += y[i] * g[i];
}

tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *a) {
    tg_tensor *out = tg_new_like(ctx, a);
    for (int64_t i = 0; i < a->numel; i++) out->data[i] = expf(a->data[i]);
    tg_record(ctx, "tg_exp", exp_backward, out, 1, (tg_tensor *[]){a}, 0);
    return out;
}
