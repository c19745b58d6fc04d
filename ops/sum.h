/* tg_sum: out = Σ x over every element, accumulated in double.
 *
 * Shapes: x [...], out [1].  Gradient: dx = dout (the same for every element). */
#ifndef TG_OP_SUM_H
#define TG_OP_SUM_H
#include "tg_core.h"

tg_tensor *tg_sum(tg_ctx *ctx, tg_tensor *x);

#endif
