#include "gelu.h"

#include <math.h>
#include <string.h>

#include "parallel.h"
#include "vmath.h"

#define GELU_C 0.7978845608028654f   /* √(2/π) */
#define GELU_K 0.044715f

/* tanh u = sign(u) (1 − e)/(1 + e), e = e^{−2|u|}; |u| is capped at 20, where
 * tanh is 1 in float, so e never underflows. Absolute error ~1e-7, which is
 * what GELU needs: gelu = x/2 · (1 + tanh). */
static inline float tanh_vec(float u) {
    /* the cap compares the bits of |u| (ordered like the values for floats
     * >= 0): a float compare would keep a branch, as it may raise a flag */
    float a = fabsf(u);
    int32_t ab;
    memcpy(&ab, &a, sizeof ab);
    ab = ab < 0x41a00000 ? ab : 0x41a00000;   /* 20.0f */
    memcpy(&a, &ab, sizeof a);
    float e = tg_exp_neg(-2.0f * a);
    return copysignf((1.0f - e) / (1.0f + e), u);
}

/* gelu'(v) of the tanh form */
static inline float dgelu(float v) {
    float t = tanh_vec(GELU_C * (v + GELU_K * v * v * v));
    float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

enum { CHUNK = 1 << 14 };   /* elements per parallel work item */

typedef struct { const float *x, *g; float *y; int64_t n; int first; } gelu_job;

/* backward recomputes tanh from x rather than saving it: cheaper than numel
 * more floats of arena per gelu */
TG_VEC_CLONES static void backward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    const float *x = j->x, *g = j->g;
    float *dx = j->y;
    if (j->first) {   /* nothing wrote dx yet: write, not add */
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] = g[i] * dgelu(x[i]);
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) dx[i] += g[i] * dgelu(x[i]);
    }
}

TG_VEC_CLONES static void forward_part(void *arg, int part, int thread) {
    (void)thread;
    const gelu_job *j = arg;
    int64_t lo = (int64_t)part * CHUNK, hi = lo + CHUNK < j->n ? lo + CHUNK : j->n;
    const float *x = j->x;
    float *y = j->y;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanh_vec(GELU_C * (v + GELU_K * v * v * v)));
    }
}

static int parts(int64_t n) { return (int)((n + CHUNK - 1) / CHUNK); }

static void gelu_backward(tg_ctx *ctx, const tg_node *n) {
    (void)ctx;
    tg_tensor *x = n->in[0];
    if (!x->grad) return;
    gelu_job j = { x->data, n->out->grad, x->grad, x->numel, tg_grad_first(x) };
    tg_parallel_for(parts(x->numel), 16 * x->numel, backward_part, &j);
}

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x) {
    tg_tensor *y = tg_new_like(ctx, x);
    gelu_job j = { x->data, NULL, y->data, x->numel, 0 };
    tg_parallel_for(parts(x->numel), 16 * x->numel, forward_part, &j);
    tg_node *n = tg_record(ctx, "tg_gelu", gelu_backward, y, 1, (tg_tensor *[]){x}, 0);
    if (n) n->own_grads = 1;
    return y;
}
