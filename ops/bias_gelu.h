/* tg_bias_gelu: y = gelu(x + b), b a bias row over x's last dimension, GELU
 * the tanh form of tg_gelu: the same values as tg_gelu(tg_add(x, b)), bit for
 * bit, in one pass over x instead of three (an MLP's first layer).
 *
 * Shapes: x [..., D], b [D]; y like x.
 * Gradient, u = x + b: dx = dy · gelu'(u) (tg_gelu's exact derivative),
 *   db = Σ over x's rows of dx. */
#ifndef TG_OP_BIAS_GELU_H
#define TG_OP_BIAS_GELU_H
#include "tg_core.h"

tg_tensor *tg_bias_gelu(tg_ctx *ctx, tg_tensor *x, tg_tensor *b);

#endif
