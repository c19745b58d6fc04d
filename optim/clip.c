/* Global gradient norm and clipping: one loop over the flat grad buffer. */
#include "tg_optim.h"

#include <math.h>

float tg_grad_norm(const tg_params *P) {
    double s = 0.0;   /* double: millions of float squares lose digits in a float sum */
    for (size_t i = 0; i < P->numel; i++) s += (double)P->grad[i] * P->grad[i];
    return (float)sqrt(s);
}

float tg_clip_grad_norm(tg_params *P, float max_norm) {
    if (isnan(max_norm))
        tg_fail_h(&P->err, "tg_clip_grad_norm: max_norm is NaN (use a value <= 0 for no clipping)");
    float norm = tg_grad_norm(P);
    if (max_norm > 0.0f && isfinite(norm) && norm > max_norm) {
        float scale = (float)(max_norm / ((double)norm + 1e-6));
        for (size_t i = 0; i < P->numel; i++) P->grad[i] *= scale;
    }
    return norm;
}
