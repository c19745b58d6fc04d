/* tg_rmsnorm: y = x · rstd ⊙ gain over the last dimension, rstd = 1 / sqrt(mean(x²) + eps) per row.
 *
 * Shapes: x [..., D]; gain NULL (no gain) or with x's trailing dimensions: [D],
 * or [H, D] for per-head gains when x is [B, T, H, D] (QK-norm); y like x.
 * Gradient, with x̂ = x·rstd and ĝ = dy ⊙ gain per row:
 *   dx = rstd · (ĝ − x̂ · mean(ĝ ⊙ x̂)),  dgain = Σ over repeats of dy ⊙ x̂. */
#ifndef TG_OP_RMSNORM_H
#define TG_OP_RMSNORM_H
#include "tg_core.h"

tg_tensor *tg_rmsnorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gain, float eps);

#endif
