#include "gelu.h"

#include <math.h>

#define GELU_C 0.7978845608028654f   /* √(2/π) */
#define GELU_K 0.044715f

/* backward recomputes tanh from x rather than saving it: one tanhf per element
 * is cheaper than numel more floats of arena per gelu */
static void gelu_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    const float *g = n->out->grad;
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        float t = tanhf(GELU_C * (v + GELU_K * v * v * v));
        float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
        x->grad[i] += g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    for (int64_t i = 0; i < x->numel; i++) {
        float v = x->data[i];
        y->data[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_K * v * v * v)));
    }
    tg_record(ctx, "tg_gelu", gelu_backward, y, 1, (tg_tensor *[]){x}, 0);
    return y;
}
