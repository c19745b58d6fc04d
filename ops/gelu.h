/* tg_gelu: y = 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), the tanh form.
 *
 * Shapes: x [...], y the same.
 * Gradient (exact for this form, t = tanh(u)):
 *   dx = dy · (0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²)). */
#ifndef TG_OP_GELU_H
#define TG_OP_GELU_H
#include "tg_core.h"

tg_tensor *tg_gelu(tg_ctx *ctx, tg_tensor *x);

#endif
