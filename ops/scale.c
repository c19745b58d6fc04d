#include "scale.h"

#include <math.h>

typedef struct { float s; } scale_rec;

static void scale_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const scale_rec *r = n->saved;
    tg_tensor *a = n->in[0];
    const float *g = n->out->grad;
    if (a->grad)
        for (int64_t i = 0; i < a->numel; i++) a->grad[i] += r->s * g[i];
}

tg_tensor *tg_scale(tg_ctx *ctx, tg_tensor *a, float s) {
    if (!isfinite(s))   /* an inf or NaN scale would silently poison every value and grad */
        tg_fail(ctx, "tg_scale: the scale is %g for %s; it must be finite", (double)s, TG_SHAPE(a));
    tg_tensor *out = tg_new_like(ctx, a);
    for (int64_t i = 0; i < a->numel; i++) out->data[i] = s * a->data[i];
    tg_node *n = tg_record(ctx, "tg_scale", scale_backward, out, 1, (tg_tensor *[]){a}, sizeof(scale_rec));
    if (n) ((scale_rec *)n->saved)->s = s;
    return out;
}
