/* Vectorisable math for the ops' hot loops (not an op: no TG_OPS line).
 * Plain arithmetic that GCC vectorises under #pragma omp simd, where glibc's
 * expf/tanhf are scalar calls. */
#ifndef TG_VMATH_H
#define TG_VMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* a·b + c, fused (one rounding: fmaf) or not (two) */
static inline float tg_mad_(float a, float b, float c, int fused) { return fused ? fmaf(a, b, c) : a * b + c; }

/* e^x for x <= 0 (softmax, log-sum-exp, tanh): within 1.2 ulp of e^x on
 * [-87, 0] (glibc's expf: 0.5; the mean error of both is 0.06 ulp; measured
 * on every 8th float of the range), 0 below -87 (e^-87 = 1.6e-38), NaN for
 * NaN. x = n ln2 + r, |r| <= ln2/2; e^r by its Taylor series to r⁷
 * (truncation < 1e-8 relative); 2^n built in the exponent bits.
 * "Below -87" and "NaN" compare the bits (a float below -87 has larger bits
 * than -87 as a uint32, and +0 or any x >= 0 smaller): a float compare may raise a flag, so GCC
 * keeps it as a branch and, without AVX-512's masks, vectorises none of the
 * loop (the AVX2 clone of GELU ran scalar, 12× slower than the AVX-512 one on an AMD Zen 5,
 * OpenBLAS Haswell, libxsmm hsw: issue 20). Same
 * results as the float compares. */
static inline float tg_exp_neg_(float x, int fused) {
    const float shift = 12582912.0f;   /* 1.5·2²³: adding it rounds to an integer */
    int32_t xb;
    memcpy(&xb, &x, sizeof xb);
    int below = (uint32_t)xb > 0xc2ae0000u;           /* x < -87.0f, or a NaN with its sign bit */
    int nan = (xb & 0x7fffffff) > 0x7f800000;
    /* xc = nan or below ? -87 : x, in bits: written as ?:, GCC computes the -87 arm as a constant
     * and branches around the rest */
    int32_t clamp = -(nan | below), xcb = (xb & ~clamp) | ((int32_t)0xc2ae0000 & clamp);
    float xc;   /* NaN too: n stays a small integer */
    memcpy(&xc, &xcb, sizeof xc);
    float n = tg_mad_(xc, 1.44269504f, shift, fused) - shift;
    /* ln2 in two parts: n·hi exact, so xc − n·hi is the same fused or not */
    float r = fused ? fmaf(-n, -2.12194440e-4f, fmaf(-n, 0.693359375f, xc))
                    : (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.0f / 5040;
    p = tg_mad_(p, r, 1.0f / 720, fused);
    p = tg_mad_(p, r, 1.0f / 120, fused);
    p = tg_mad_(p, r, 1.0f / 24, fused);
    p = tg_mad_(p, r, 1.0f / 6, fused);
    p = tg_mad_(p, r, 0.5f, fused);
    p = tg_mad_(p, r, 1.0f, fused);
    p = tg_mad_(p, r, 1.0f, fused);
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    /* y = below ? 0 : nan ? x : p·scale, in bits: written as ?:, GCC puts p·scale under the
     * condition (a float op that might raise a flag) and does not vectorise a loop with a branch */
    float y = p * scale;
    int32_t yb, keep = below - 1, take_x = -nan;   /* all ones or zero */
    memcpy(&yb, &y, sizeof yb);
    yb = ((yb & keep) & ~take_x) | (xb & take_x);
    memcpy(&y, &yb, sizeof y);
    return y;
}
static inline float tg_exp_neg(float x) { return tg_exp_neg_(x, 0); }
/* The attention tiles' e^x (attn_tile.h): tg_exp_neg with its range reduction and
 * seven Horner steps fused (fmaf: one rounding a step, not two). Within 0.94 ulp of
 * e^x on [-87, 0], mean 0.062 (tg_exp_neg: 1.22, 0.063; both measured against exp in
 * double on every float of the range); 0 below -87, NaN for NaN, as tg_exp_neg.
 * Where no FMA instruction is compiled in, fmaf is a libm call: for the tiles'
 * plain-C copy, the reference the vector copies match. */
static inline float tg_exp_neg_fma(float x) { return tg_exp_neg_(x, 1); }

/* Reductions of a row, in 16 lanes (GCC's vector extension, as 32-byte
 * vectors: one register each on AVX2 and AVX-512; 64-byte ones went through
 * the stack in the AVX2 clone) halved in a fixed order at the end. GCC ends an
 * `omp simd reduction` loop by folding its lanes one at a time through memory,
 * 16 dependent scalar ops: in a 32-key softmax row that fold cost more than the
 * row's exps (perf, AMD Zen 4, libxsmm cpx). Here the order of a sum is the same on every
 * ISA, too. Always inlined: the caller's target clone is the code's ISA.
 * The max skips NaN (x > m is false), as the loops it replaces did. */
typedef float tg_vf8 __attribute__((vector_size(32), aligned(4)));
typedef float tg_vf4 __attribute__((vector_size(16), aligned(4)));
typedef int32_t tg_vi8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t tg_vi4 __attribute__((vector_size(16), aligned(4)));
typedef double tg_vd4 __attribute__((vector_size(32), aligned(8)));
typedef double tg_vd2 __attribute__((vector_size(16), aligned(8)));
#define TG_INLINE __attribute__((always_inline)) static inline
#define TG_VMAX(T, I, a, b) ((T)(((I)(b) & ((b) > (a))) | ((I)(a) & ~((b) > (a)))))   /* b > a ? b : a */

TG_INLINE float tg_row_max(const float *x, int n) {
    tg_vf8 m0 = (tg_vf8){0} - INFINITY, m1 = m0;   /* lanes 0-7 and 8-15 */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        m0 = TG_VMAX(tg_vf8, tg_vi8, m0, *(const tg_vf8 *)(x + j));
        m1 = TG_VMAX(tg_vf8, tg_vi8, m1, *(const tg_vf8 *)(x + j + 8));
    }
    /* folded in registers (shuffles: halves copied through memory stalled the row) */
    m0 = TG_VMAX(tg_vf8, tg_vi8, m1, m0);
    tg_vf4 m = TG_VMAX(tg_vf4, tg_vi4, __builtin_shufflevector(m0, m0, 4, 5, 6, 7),
                       __builtin_shufflevector(m0, m0, 0, 1, 2, 3));
    m = TG_VMAX(tg_vf4, tg_vi4, __builtin_shufflevector(m, m, 2, 3, 2, 3), m);
    m = TG_VMAX(tg_vf4, tg_vi4, __builtin_shufflevector(m, m, 1, 1, 1, 1), m);
    float a = m[0];
    for (; j < n; j++) a = x[j] > a ? x[j] : a;
    return a;
}

/* Σ x[j]·y[j] in double (y NULL: Σ x[j]). Four named accumulators, not an
 * array: GCC at -O2 kept an array of them on the stack, and every add went
 * through a store and a load (perf: the op's hottest lines at T 32). */
#define TG_DOT4(acc, k)                                                          \
    do {                                                                         \
        tg_vd4 a_ = __builtin_convertvector(*(const tg_vf4 *)(x + j + 4 * k), tg_vd4); \
        if (y) a_ *= __builtin_convertvector(*(const tg_vf4 *)(y + j + 4 * k), tg_vd4); \
        acc += a_;                                                               \
    } while (0)
TG_INLINE double tg_row_dot_d(const float *x, const float *y, int n) {
    tg_vd4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};   /* lanes 0-3, 4-7, 8-11, 12-15 */
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        TG_DOT4(a0, 0);
        TG_DOT4(a1, 1);
        TG_DOT4(a2, 2);
        TG_DOT4(a3, 3);
    }
    a0 += a2, a1 += a3;   /* 16 lanes to 8, 8 to 4, 4 to 2, 2 to 1 */
    a0 += a1;
    tg_vd2 s2 = __builtin_shufflevector(a0, a0, 0, 1) + __builtin_shufflevector(a0, a0, 2, 3);
    double s = s2[0] + s2[1];
    for (; j < n; j++) s += y ? (double)x[j] * y[j] : (double)x[j];
    return s;
}
#undef TG_DOT4

/* keep ? x : y for keep 0 or 1, in bits: with a float op in one arm of a ?:,
 * GCC keeps the op under a branch (it may raise a flag) and the AVX2 clone's
 * loop scalar (as tg_exp_neg's selects) */
TG_INLINE float tg_select(int keep, float x, float y) {
    int32_t xb, yb, m = -keep;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&yb, &y, sizeof yb);
    xb = (xb & m) | (yb & ~m);
    memcpy(&x, &xb, sizeof x);
    return x;
}

#endif
