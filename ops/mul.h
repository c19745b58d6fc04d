/* tg_mul: out = a ⊙ b, elementwise.
 *
 * Shapes: a [...]; b with a's shape, or with a's trailing dimensions (repeated
 * over a's leading ones, as in tg_add). out has a's shape.
 * Gradient: da = dout ⊙ b,  db = dout ⊙ a summed over the dimensions b was repeated along. */
#ifndef TG_OP_MUL_H
#define TG_OP_MUL_H
#include "tg_core.h"

tg_tensor *tg_mul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b);

#endif
