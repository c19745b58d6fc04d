/* tg_exp: out = e^a elementwise (expf), e.g. a positive scale kept as its log.
 * Shapes: a [...], out the same.  Gradient: da = out · dout.
 * Large inputs overflow to inf as expf does (a > ~88.7); the training guards
 * report such a value where it appears. */
#ifndef TG_OP_EXP_H
#define TG_OP_EXP_H
#include "tg_core.h"

tg_tensor *tg_exp(tg_ctx *ctx, tg_tensor *a);

#endif
