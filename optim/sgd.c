/* SGD with momentum over the flat parameter buffers. */
#include "tg_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tg_sgd_init(tg_sgd *o, const tg_params *P, float momentum, float weight_decay) {
    memset(o, 0, sizeof *o);
    if (!P->allocated)
        tg_fail_h(&P->err, "tg_sgd_init: parameters not allocated (call tg_params_alloc first)");
    /* written as !(x in range) so that NaN fails too */
    if (!(momentum >= 0.0f && momentum < 1.0f))
        tg_fail_h(&P->err, "tg_sgd_init: momentum %g outside [0, 1)", momentum);
    if (!(weight_decay >= 0.0f && isfinite(weight_decay)))
        tg_fail_h(&P->err, "tg_sgd_init: weight_decay %g must be finite and >= 0", weight_decay);
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    o->n = P->numel;
    if (momentum > 0.0f) {
        /* zeroed, so μ·buf + g = g at the first step, as PyTorch's buf = g */
        o->buf = calloc(o->n ? o->n : 1, sizeof(float));
        if (!o->buf) tg_fail_h(&P->err, "tg_sgd_init: out of memory for %zu floats", o->n);
    }
}

void tg_sgd_step(tg_sgd *o, tg_params *P, float lr) {
    if (!(lr >= 0.0f && isfinite(lr)))
        tg_fail_h(&P->err, "tg_sgd_step: lr %g must be finite and >= 0", lr);
    if (o->n != P->numel || !P->allocated)
        tg_fail_h(&P->err, "tg_sgd_step: optimizer made for %zu parameter floats, the parameters have %zu%s",
                  o->n, P->numel, P->allocated ? "" : " (not allocated)");
    if (o->momentum > 0.0f && !o->buf)
        tg_fail_h(&P->err, "tg_sgd_step: optimizer has no momentum buffer (freed, or never initialised)");
    for (int p = 0; p < P->n; p++)
        if (!(P->list[p]->lr_mult >= 0.0f && isfinite(P->list[p]->lr_mult)))
            tg_fail_h(&P->err, "tg_sgd_step: parameter '%s' has lr_mult %g; it must be finite and >= 0",
                      P->list[p]->name, P->list[p]->lr_mult);
    const float mu = o->momentum;
    float *buf = o->buf;
    /* one range per parameter, for its own weight decay and rate; the ranges
     * tile the flat buffers in order */
    for (int p = 0; p < P->n; p++) {
        const tg_tensor *t = P->list[p];
        const float wd = t->decay ? o->weight_decay : 0.0f, lr_p = lr * t->lr_mult;
        const size_t lo = (size_t)(t->data - P->data), hi = lo + (size_t)t->numel;
        for (size_t i = lo; i < hi; i++) {
            float d = P->grad[i] + wd * P->data[i];
            if (buf) {
                d += mu * buf[i];
                buf[i] = d;
            }
            P->data[i] -= lr_p * d;
        }
    }
}

void tg_sgd_free(tg_sgd *o) {
    free(o->buf);
    memset(o, 0, sizeof *o);
}
