/* Vectorisable math for the ops' hot loops (not an op: no TG_OPS line).
 * Plain arithmetic that GCC vectorises under #pragma omp simd, where glibc's
 * expf/tanhf are scalar calls. */
#ifndef TG_VMATH_H
#define TG_VMATH_H
#include <stdint.h>
#include <string.h>

/* e^x for x <= 0 (softmax, log-sum-exp, tanh): within 1.2 ulp of e^x on
 * [-87, 0] (glibc's expf: 0.5; the mean error of both is 0.06 ulp; measured
 * on every 8th float of the range), 0 below -87 (e^-87 = 1.6e-38), NaN for
 * NaN. x = n ln2 + r, |r| <= ln2/2; e^r by its Taylor series to r⁷
 * (truncation < 1e-8 relative); 2^n built in the exponent bits. */
static inline float tg_exp_neg(float x) {
    const float shift = 12582912.0f;   /* 1.5·2²³: adding it rounds to an integer */
    float xc = x > -87.0f ? x : -87.0f;   /* NaN too: n stays a small integer */
    float n = (xc * 1.44269504f + shift) - shift;
    float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;   /* ln2 in two parts: n·hi exact */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = x >= -87.0f ? p * scale : 0.0f;
    return x == x ? y : x;
}

#endif
