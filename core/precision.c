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
/* bf16: tg_bf16_of's bits, written so that the compiler vectorises it */
static void bf16_copy(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x400000u) & 0xffff0000u
                                                            : (u + 0x7fffu + (u >> 16 & 1u)) & 0xffff0000u;
        memcpy(y + i, &r, 4);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
/* fp16 by the CPU's conversion (F16C, in every x86-64 CPU with AVX2): IEEE round to nearest
 * even, as tg_f16_of; 8 at a time */
__attribute__((target("avx,f16c"))) static void f16_copy_f16c(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) y[i] = tg_f32_of_f16(tg_f16_of(x[i]));
}
static int has_f16c(void) {   /* CPUID 1, ECX bit 29 (clang 14 has no "f16c" for __builtin_cpu_supports) */
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1) && __builtin_cpu_supports("avx");
}
/* bf16 8 at a time: bf16_copy's bits (GCC 12 at -O2 leaves that loop scalar: 1.5 ns a value) */
__attribute__((target("avx2"))) static void bf16_copy_avx2(const float *x, float *y, int64_t n) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(half, lsb)), hi);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        const __m256i q = _mm256_and_si256(_mm256_or_si256(u, quiet), hi);
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_blendv_epi8(r, q, nan));
    }
    bf16_copy(x + i, y + i, n - i);
}
static int has_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static void bf16_copy_avx2(const float *x, float *y, int64_t n) { bf16_copy(x, y, n); }
static int has_avx2(void) { return 0; }
static void f16_copy_f16c(const float *x, float *y, int64_t n) { (void)x, (void)y, (void)n; }
static int has_f16c(void) { return 0; }
#endif

void tg_round_copy(int p, const float *x, float *y, int64_t n) {
    if (p == TG_BF16 && has_avx2()) {
        bf16_copy_avx2(x, y, n);
    } else if (p == TG_BF16) {
        bf16_copy(x, y, n);
    } else if (p == TG_FP16 && has_f16c()) {
        f16_copy_f16c(x, y, n);
    } else if (p == TG_FP16) {
        for (int64_t i = 0; i < n; i++) y[i] = tg_f32_of_f16(tg_f16_of(x[i]));
    } else if (x != y) {
        memcpy(y, x, (size_t)n * sizeof(float));
    }
}

void tg_round_all(int p, float *x, int64_t n) {
    if (p == TG_FP32) return;
    tg_round_copy(p, x, x, n);
}
