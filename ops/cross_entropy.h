/* tg_cross_entropy: loss = mean over counted positions p of −log softmax(logits[p, :])[targets[p]].
 *
 * Shapes: logits [..., V]; targets numel/V ints, each in [0, V) or −1 (an ignored
 * position, left out of the mean; copied: the caller may reuse its buffer);
 * loss [1]. Log-softmax is fused and stable (row max subtracted).
 * Gradient: dlogits[p, :] = dloss · (softmax(logits[p, :]) − onehot(targets[p])) / count
 * for counted positions, 0 for ignored ones. */
#ifndef TG_OP_CROSS_ENTROPY_H
#define TG_OP_CROSS_ENTROPY_H
#include "tg_core.h"

tg_tensor *tg_cross_entropy(tg_ctx *ctx, tg_tensor *logits, const int *targets);

#endif
