/* Dynamic loss scaling (tg_optim.h): the backward seeded with a power of two, the
 * grads divided by it, the scale moved by overflows. */
#include "tg_optim.h"

#include <math.h>

void tg_loss_scale_init(tg_loss_scale *s) { *s = (tg_loss_scale){.scale = 65536.0f, .good = 0, .interval = 2000, .skipped = 0}; }

int tg_loss_scale_unscale(tg_loss_scale *s, tg_params *P) {
    const size_t n = P->numel;
    float *g = P->grad;
    int finite = 1;
    for (size_t i = 0; i < n && finite; i++) finite = isfinite(g[i]);
    if (!finite) {
        s->skipped++;
        s->good = 0;
        /* never below 1: a run whose grads overflow unscaled is not fp16's rounding */
        if (s->scale > 1.0f) s->scale *= 0.5f;
        return 0;
    }
    const float inv = 1.0f / s->scale;   /* a power of two: exact */
    for (size_t i = 0; i < n; i++) g[i] *= inv;
    if (++s->good >= s->interval && s->scale < 0x1p100f) {
        s->scale *= 2.0f;
        s->good = 0;
    }
    return 1;
}
