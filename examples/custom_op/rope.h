/* rope: rotary position embeddings (Su et al. 2021, RoFormer), an op written
 * outside tapegrad with its public API only.
 *
 * Shapes: x [B, T, H, d] (the layout tg_attention takes for q and k), d even;
 * out the same. Position t turns each pair (x[2i], x[2i+1]) of every head by
 * the angle t·θ_i, θ_i = base^(−2i/d):
 *   out[2i]   = x[2i]·cos − x[2i+1]·sin
 *   out[2i+1] = x[2i]·sin + x[2i+1]·cos
 * Applied to q and k, the score q_t·k_s then depends on t − s only.
 * Gradient: the inverse rotation (a rotation's transpose is its inverse)
 *   dx[2i]   =  dout[2i]·cos + dout[2i+1]·sin
 *   dx[2i+1] = −dout[2i]·sin + dout[2i+1]·cos */
#ifndef ROPE_H
#define ROPE_H
#include <tapegrad/tapegrad.h>

tg_tensor *rope(tg_ctx *ctx, tg_tensor *x, float base);

#endif
