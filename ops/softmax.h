/* tg_softmax: y = softmax(x) over the last dimension, row by row.
 *
 * Shapes: x [..., N] -> y [..., N]. With causal != 0, x is [..., T, T] and row
 * i only sees keys j <= i: masked entries are skipped (never read) and get
 * weight exactly 0 and gradient exactly 0.
 * Gradient (O(n) per row): dx = y ⊙ (dy − Σ_j dy_j y_j), over visible j. */
#ifndef TG_OP_SOFTMAX_H
#define TG_OP_SOFTMAX_H
#include "tg_core.h"

tg_tensor *tg_softmax(tg_ctx *ctx, tg_tensor *x, int causal);

#endif
