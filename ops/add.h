/* tg_add: out = a + b.
 *
 * Shapes: a [...]; b with a's shape, or with a's trailing dimensions (a bias:
 * a [B,T,D] + b [D] or + b [T,D]), repeated over a's leading ones. out has a's shape.
 * Gradient: da = dout,  db = dout summed over the dimensions b was repeated along. */
#ifndef TG_OP_ADD_H
#define TG_OP_ADD_H
#include "tg_core.h"

tg_tensor *tg_add(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);

#endif
