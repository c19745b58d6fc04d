/* bfloat16 and IEEE half from and to float (tg_precision.h): bit operations, no hardware needed. */
#include <math.h>
#include <string.h>

#include "tg_precision.h"

static const char *const names[TG_N_PRECISIONS] = {"fp32", "bf16", "fp16"};

const char *tg_precision_name(int p) { return p >= 0 && p < TG_N_PRECISIONS ? names[p] : "?"; }
int tg_precision_of(const char *name) {
    for (int p = 0; name && p < TG_N_PRECISIONS; p++)
        if (!strcmp(name, names[p])) return p;
    return -1;
}
double tg_precision_u(int p) { return p == TG_BF16 ? 0x1p-8 : p == TG_FP16 ? 0x1p-11 : 0x1p-24; }

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float of_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t tg_bf16_of(float x) {
    const uint32_t u = bits(x);
    if (isnan(x)) return (uint16_t)(u >> 16 | 0x40);   /* a quiet NaN whatever the payload's low bits */
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);   /* overflow carries into the exponent: inf */
}
float tg_f32_of_bf16(uint16_t h) { return of_bits((uint32_t)h << 16); }

uint16_t tg_f16_of(float x) {
    const uint32_t u = bits(x), sign = u >> 16 & 0x8000;
    const float a = fabsf(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);   /* past the largest half after rounding */
    if (a < 0x1p-14f) {   /* subnormal: multiples of 2^-24, rounded to nearest even by the float add */
        const float m = a * 0x1p24f;   /* exact: a power of two */
        const float r = m + 0x1p23f - 0x1p23f;   /* round to an integer, ties to even (m < 2^10) */
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t e = (bits(a) >> 23) - 127 + 15, m = bits(a) & 0x7fffff;
    uint32_t h = e << 10 | m >> 13;
    const uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;   /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}
float tg_f32_of_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
    if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
    if (e == 31) return of_bits(sign | 0x7f800000 | m << 13);
    return of_bits(sign | (e - 15 + 127) << 23 | m << 13);
}

float tg_round_to(int p, float x) {
    return p == TG_BF16 ? tg_f32_of_bf16(tg_bf16_of(x)) : p == TG_FP16 ? tg_f32_of_f16(tg_f16_of(x)) : x;
}
void tg_round_all(int p, float *x, int64_t n) {
    if (p == TG_FP32) return;
    for (int64_t i = 0; i < n; i++) x[i] = tg_round_to(p, x[i]);
}
