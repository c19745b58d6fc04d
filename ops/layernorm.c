#include "layernorm.h"

#include <math.h>

typedef struct { int64_t rows; int D; float *mean, *rstd; } layernorm_rec;

static void layernorm_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const layernorm_rec *r = n->saved;
    tg_tensor *x = n->in[0], *gain = n->in[1], *bias = n->in[2];
    int D = r->D;
    for (int64_t i = 0; i < r->rows; i++) {
        const float *xr = x->data + i * D, *dy = n->out->grad + i * D;
        float mu = r->mean[i], rs = r->rstd[i];
        double sg = 0, sgx = 0;   /* Σ ĝ and Σ ĝ·x̂ */
        for (int j = 0; j < D; j++) {
            float xh = (xr[j] - mu) * rs;
            float gh = dy[j] * (gain ? gain->data[j] : 1.0f);
            sg += gh;
            sgx += gh * xh;
            if (gain && gain->grad) gain->grad[j] += dy[j] * xh;
            if (bias && bias->grad) bias->grad[j] += dy[j];
        }
        if (!x->grad) continue;
        float mg = (float)(sg / D), mgx = (float)(sgx / D);
        float *dx = x->grad + i * D;
        for (int j = 0; j < D; j++) {
            float xh = (xr[j] - mu) * rs;
            float gh = dy[j] * (gain ? gain->data[j] : 1.0f);
            dx[j] += rs * (gh - mg - xh * mgx);
        }
    }
}

tg_tensor *tg_layernorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gain, tg_tensor *bias, float eps) {
    int D = x->shape[x->ndim - 1];
    if (gain && (gain->ndim != 1 || gain->shape[0] != D))
        tg_fail(ctx, "tg_layernorm: gain %s does not match x %s: it must be [%d]", TG_SHAPE(gain),
                TG_SHAPE(x), D);
    if (bias && (bias->ndim != 1 || bias->shape[0] != D))
        tg_fail(ctx, "tg_layernorm: bias %s does not match x %s: it must be [%d]", TG_SHAPE(bias),
                TG_SHAPE(x), D);
    if (!(eps >= 0))
        tg_fail(ctx, "tg_layernorm: eps is %g for x %s; it must be >= 0", (double)eps, TG_SHAPE(x));
    int64_t rows = x->numel / D;
    tg_tensor *y = tg_new_like(ctx, x);
    /* saved always: two floats a row is cheap, and recording is decided after the output exists */
    float *mean = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));
    float *rstd = tg_arena_alloc(ctx, (size_t)rows * sizeof(float));
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x->data + i * D;
        float *yr = y->data + i * D;
        double s = 0, ss = 0;
        for (int j = 0; j < D; j++) s += xr[j];
        double mu = s / D;
        for (int j = 0; j < D; j++) ss += (xr[j] - mu) * (xr[j] - mu);   /* two-pass: no cancellation */
        float m = (float)mu, rs = (float)(1.0 / sqrt(ss / D + eps));
        mean[i] = m;
        rstd[i] = rs;
        for (int j = 0; j < D; j++) {
            float v = (xr[j] - m) * rs;
            if (gain) v *= gain->data[j];
            if (bias) v += bias->data[j];
            yr[j] = v;
        }
    }
    tg_node *n = tg_record(ctx, "tg_layernorm", layernorm_backward, y, 3, (tg_tensor *[]){x, gain, bias},
                           sizeof(layernorm_rec));
    if (n) *(layernorm_rec *)n->saved = (layernorm_rec){ .rows = rows, .D = D, .mean = mean, .rstd = rstd };
    return y;
}
