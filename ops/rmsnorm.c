#include "rmsnorm.h"

#include <math.h>

/* gain covers x's trailing dims, so it holds gain_rows rows of D and row i of x
 * uses gain row i % gain_rows. */
typedef struct { int64_t rows; int D, gain_rows; float *rstd; } rmsnorm_rec;

static void rmsnorm_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const rmsnorm_rec *r = n->saved;
    tg_tensor *x = n->in[0], *gain = n->in[1];
    int D = r->D;
    for (int64_t i = 0; i < r->rows; i++) {
        const float *xr = x->data + i * D, *dy = n->out->grad + i * D;
        const float *w = gain ? gain->data + (i % r->gain_rows) * D : NULL;
        float *dw = gain && gain->grad ? gain->grad + (i % r->gain_rows) * D : NULL;
        float rs = r->rstd[i];
        double sgx = 0;   /* Σ ĝ·x̂ */
        for (int j = 0; j < D; j++) {
            float xh = xr[j] * rs;
            sgx += (double)dy[j] * (w ? w[j] : 1.0f) * xh;
            if (dw) dw[j] += dy[j] * xh;
        }
        if (!x->grad) continue;
        float mgx = (float)(sgx / D);
        float *dx = x->grad + i * D;
        for (int j = 0; j < D; j++) dx[j] += rs * (dy[j] * (w ? w[j] : 1.0f) - xr[j] * rs * mgx);
    }
}

tg_tensor *tg_rmsnorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gain, float eps) {
    int D = x->shape[x->ndim - 1];
    if (gain && !tg_is_trailing_shape(x, gain))
        tg_fail(ctx, "tg_rmsnorm: gain %s does not match x %s: it must have x's trailing dimensions",
                TG_SHAPE(gain), TG_SHAPE(x));
    if (!(eps >= 0))
        tg_fail(ctx, "tg_rmsnorm: eps is %g for x %s; it must be >= 0", (double)eps, TG_SHAPE(x));
    int64_t rows = x->numel / D;
    int gain_rows = gain ? (int)(gain->numel / D) : 1;
    tg_tensor *y = tg_new_like(ctx, x);
    float *rstd = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));   /* one float a row: always saved */
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * D;
        const float *w = gain ? gain->data + (i % gain_rows) * D : NULL;
        float *yr = y->data + i * D;
        double ss = 0;
        for (int j = 0; j < D; j++) ss += (double)xr[j] * xr[j];
        float rs = (float)(1.0 / sqrt(ss / D + eps));
        rstd[i] = rs;
        for (int j = 0; j < D; j++) yr[j] = xr[j] * rs * (w ? w[j] : 1.0f);
    }
    tg_node *n = tg_record(ctx, "tg_rmsnorm", rmsnorm_backward, y, 2, (tg_tensor *[]){x, gain},
                           sizeof(rmsnorm_rec));
    if (n) *(rmsnorm_rec *)n->saved = (rmsnorm_rec){ .rows = rows, .D = D, .gain_rows = gain_rows, .rstd = rstd };
    return y;
}
