/* tg_mean: out = (1/n) Σ x over all n elements, accumulated in double.
 *
 * Shapes: x [...], out [1].  Gradient: dx = dout / n. */
#ifndef TG_OP_MEAN_H
#define TG_OP_MEAN_H
#include "tg_core.h"

tg_tensor *tg_mean(tg_ctx *ctx, tg_tensor *x);

#endif
