/* tg_reshape: the same elements, in the same order, under another shape.
 *
 * Shapes: x [...] to out [shape[0], ..., shape[ndim-1]] with the same element
 * count. out is a view: it shares x's data (no copy) and has its own grad,
 * except after backward when this op was x's only reader and x a non-parameter:
 * then x->grad points at out's grad buffer (dx = dout whole; no copy made).
 * Gradient: dx = dout, read under x's shape. */
#ifndef TG_OP_RESHAPE_H
#define TG_OP_RESHAPE_H
#include "tg_core.h"

tg_tensor *tg_reshape(tg_ctx *ctx, tg_tensor *x, int ndim, const int *shape);

#endif
