/* tg_matmul: C = op(A) · op(B), op(X) = X or Xᵀ by the transpose flags.
 *
 * Shapes: a [..., M, K] ([..., K, M] if ta); b [K, N] ([N, K] if tb), shared by
 * every batch, or b with a's leading (batch) dimensions. out [..., M, N].
 * Gradient: dop(A) = dC · op(B)ᵀ,  dop(B) = op(A)ᵀ · dC (summed over the batch
 * when b is shared). Runs on tg_gemm (ops/gemm.h). Under a context precision
 * (tg_ctx_set_precision) a, b and dC are rounded to it before their products. */
#ifndef TG_OP_MATMUL_H
#define TG_OP_MATMUL_H
#include "tg_core.h"

tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b, int ta, int tb);

#endif
