/* tg_embedding: out[b,t,:] = table[idx[b·T + t], :], a row lookup.
 *
 * Shapes: table [V, D]; idx B·T ints in [0, V) (copied: the caller may reuse
 * its buffer); out [B, T, D].
 * Gradient: dtable[idx[p], :] += dout[p, :] for every position p (an index used
 * twice gets both rows). */
#ifndef TG_OP_EMBEDDING_H
#define TG_OP_EMBEDDING_H
#include "tg_core.h"

tg_tensor *tg_embedding(tg_ctx *ctx, tg_tensor *table, const int *idx, int B, int T);

#endif
