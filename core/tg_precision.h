/* Precisions below float32 (since 0.21): bfloat16 and IEEE half, as values rounded from float.
 * A kernel declares the one it computes in (attn_kernel.h); the exec protocol carries tensors in
 * it (safetensors' BF16, F16); attn_check judges such a kernel against a textbook computed in it.
 * tapegrad's own arithmetic stays float32: these only round and widen. */
#ifndef TG_PRECISION_H
#define TG_PRECISION_H
#include <stdint.h>

typedef enum { TG_FP32 = 0, TG_BF16 = 1, TG_FP16 = 2, TG_N_PRECISIONS } tg_precision;

/* "fp32", "bf16", "fp16"; "?" for others. */
const char *tg_precision_name(int p);
/* The precision named (the names above); -1 when none is. */
int tg_precision_of(const char *name);
/* Its unit roundoff u: the largest relative error of one rounding to nearest (2^-24, 2^-8, 2^-11). */
double tg_precision_u(int p);

/* Round to nearest, ties to even; NaN stays NaN, ±inf stays, a value past the type's range
 * becomes ±inf (fp16: |x| ≥ 65520), subnormals as IEEE (fp16's below 2^-14). */
uint16_t tg_bf16_of(float x);
float tg_f32_of_bf16(uint16_t h);
uint16_t tg_f16_of(float x);
float tg_f32_of_f16(uint16_t h);
/* x rounded to p and widened back (x itself for fp32) */
float tg_round_to(int p, float x);
/* n values of x rounded to p in place */
void tg_round_all(int p, float *x, int64_t n);
/* y = x rounded to p, n values (y may be x): tg_round_to's values (a NaN stays a NaN, its
 * payload may differ), vectorised; fp16 by the CPU's F16C conversion where it has one (0.22) */
void tg_round_copy(int p, const float *x, float *y, int64_t n);

#endif
