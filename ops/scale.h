/* tg_scale: out = s · a for a constant, finite float s.
 *
 * Shapes: a [...], out the same.  Gradient: da = s · dout. */
#ifndef TG_OP_SCALE_H
#define TG_OP_SCALE_H
#include "tg_core.h"

tg_tensor *tg_scale(tg_ctx *ctx, tg_tensor *a, float s);

#endif
