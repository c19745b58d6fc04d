/* tg_layernorm: y = (x − μ) · rstd ⊙ gain + bias over the last dimension,
 * μ = mean(x), rstd = 1 / sqrt(mean((x − μ)²) + eps), per row.
 *
 * Shapes: x [..., D]; gain [D], bias [D] (either may be NULL: 1 and 0); y like x.
 * Gradient, with x̂ = (x − μ)·rstd and ĝ = dy ⊙ gain per row:
 *   dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)),  dgain = Σ_rows dy ⊙ x̂,  dbias = Σ_rows dy. */
#ifndef TG_OP_LAYERNORM_H
#define TG_OP_LAYERNORM_H
#include "tg_core.h"

tg_tensor *tg_layernorm(tg_ctx *ctx, tg_tensor *x, tg_tensor *gain, tg_tensor *bias, float eps);

#endif
