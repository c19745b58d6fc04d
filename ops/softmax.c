#include "softmax.h"

#include <math.h>

typedef struct { int64_t rows; int N; int causal; } softmax_rec;

/* Row r of a causal [.., T, T] input is query i = r mod T; it sees keys 0..i. */
static int visible(const softmax_rec *r, int64_t row) {
    return r->causal ? (int)(row % r->N) + 1 : r->N;
}

static void softmax_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    const softmax_rec *r = n->saved;
    tg_tensor *x = n->in[0], *y = n->out;
    if (!x->grad) return;
    for (int64_t row = 0; row < r->rows; row++) {
        /* y, dy, dx are (N,) rows; the masked tail j >= nv keeps dx untouched (its grad is 0) */
        const float *p = y->data + row * r->N, *g = y->grad + row * r->N;
        float *dx = x->grad + row * r->N;
        int nv = visible(r, row);
        double gp = 0;   /* <g, p>: dx = p ⊙ (g − <g, p>) is the Jacobian-vector product */
        for (int j = 0; j < nv; j++) gp += (double)g[j] * p[j];
        for (int j = 0; j < nv; j++) dx[j] += p[j] * (g[j] - (float)gp);
    }
}

tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x, int causal) {
    int N = x->shape[x->ndim - 1];
    if (causal && (x->ndim < 2 || x->shape[x->ndim - 2] != N))
        tg_fail(ctx, "tg_softmax: causal needs square last two dimensions [..,T,T], got %s", TG_SHAPE(x));
    softmax_rec r = { .rows = x->numel / N, .N = N, .causal = !!causal };
    tg_tensor *y = tg_new_like(ctx, x);

    for (int64_t row = 0; row < r.rows; row++) {
        /* x, y are (N,) rows; only the first nv entries are visible (read) */
        const float *xr = x->data + row * N;
        float *yr = y->data + row * N;
        int nv = visible(&r, row);
        float mx = xr[0];   /* subtracting the row max keeps every exp <= 1 */
        for (int j = 1; j < nv; j++) mx = xr[j] > mx ? xr[j] : mx;
        double sum = 0;
        for (int j = 0; j < nv; j++) {
            yr[j] = expf(xr[j] - mx);
            sum += yr[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < nv; j++) yr[j] *= inv;
        for (int j = nv; j < N; j++) yr[j] = 0.0f;
    }

    tg_node *n = tg_record(ctx, "tg_softmax", softmax_backward, y, 1, (tg_tensor *[]){x}, sizeof r);
    if (n) *(softmax_rec *)n->saved = r;
    return y;
}
