#include "rope.h"

#include <math.h>

typedef struct { const float *cs; } rope_rec;   /* what backward needs: the angles' table */

/* out += each pair of `in` turned by ±angle (sign −1: the inverse rotation).
 * cs holds cos and sin of t·θ_i at cs[t·d + 2i] and cs[t·d + 2i + 1]. Adding,
 * not assigning, is what backward needs: x's grad may have other terms. */
static void rotate(const int *shape, const float *cs, const float *in, float *out, float sign) {
    int T = shape[1], H = shape[2], d = shape[3];
    int64_t rows = (int64_t)shape[0] * T * H;         /* one row: one head at one position */
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cs + (size_t)(r / H % T) * d;
        const float *x = in + r * d;
        float *y = out + r * d;
        for (int i = 0; i < d; i += 2) {
            float co = c[i], si = sign * c[i + 1];
            y[i] += x[i] * co - x[i + 1] * si;
            y[i + 1] += x[i] * si + x[i + 1] * co;
        }
    }
}

static void rope_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const rope_rec *r = n->saved;
    tg_tensor *x = n->in[0];
    if (x->grad) rotate(x->shape, r->cs, n->out->grad, x->grad, -1.0f);
}

tg_tensor *rope(tg_ctx *ctx, tg_tensor *x, float base) {
    if (x->ndim != 4 || x->shape[3] % 2 != 0)      /* tg_fail: the ctx's handler, then abort */
        tg_fail(ctx, "rope: x must be [B, T, H, d] with d even, got %s", TG_SHAPE(x));
    if (!(base > 1.0f) || !isfinite(base))
        tg_fail(ctx, "rope: the base is %g; it must be a finite number > 1", (double)base);
    int T = x->shape[1], d = x->shape[3];
    float *cs = tg_arena_alloc(ctx, (size_t)T * d * sizeof *cs);   /* arena: freed by tg_ctx_reset */
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i += 2) {
            double a = t * pow(base, -(double)i / d);              /* angles in double: t·θ grows */
            cs[t * d + i] = (float)cos(a);
            cs[t * d + i + 1] = (float)sin(a);
        }
    tg_tensor *out = tg_zeros(ctx, x->ndim, x->shape);
    rotate(x->shape, cs, x->data, out->data, 1.0f);
    tg_node *n = tg_record(ctx, "rope", rope_backward, out, 1, (tg_tensor *[]){x}, sizeof(rope_rec));
    if (n) ((rope_rec *)n->saved)->cs = cs;        /* NULL: nothing needs a gradient */
    return out;
}
