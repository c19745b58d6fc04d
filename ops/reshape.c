#include "reshape.h"

static void reshape_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    const float *g = n->out->grad;
    if (x->grad)
        for (int64_t i = 0; i < x->numel; i++) x->grad[i] += g[i];
}

tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int *shape) {
    /* checked here rather than left to tg_view so the message names tg_reshape */
    if (ndim < 1 || ndim > TG_MAX_DIMS)
        tg_fail(ctx, "tg_reshape: %s to %d dimensions; 1 to %d allowed", TG_SHAPE(x), ndim, TG_MAX_DIMS);
    tg_tensor want = { .ndim = ndim };   /* only for TG_SHAPE in messages */
    for (int i = 0; i < ndim; i++) want.shape[i] = shape[i];
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            tg_fail(ctx, "tg_reshape: %s to %s: dimension %d is %d; sizes must be positive", TG_SHAPE(x),
                    TG_SHAPE(&want), i, shape[i]);
    int64_t n = tg_numel_of(ndim, shape);
    if (n != x->numel)
        tg_fail(ctx, "tg_reshape: %s has %lld elements, %s has %lld", TG_SHAPE(x), (long long)x->numel,
                TG_SHAPE(&want), (long long)n);
    tg_tensor *out = tg_view(ctx, x, ndim, shape);
    tg_record(ctx, "tg_reshape", reshape_backward, out, 1, (tg_tensor *[]){x}, 0);
    return out;
}
