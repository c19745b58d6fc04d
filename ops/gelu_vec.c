/* GELU's element loops (gelu_vec.h): a copy in plain C, and on x86-64 with GCC
 * one for AVX-512 and one for AVX2+FMA (gelu_vec_isa.h with each ISA's
 * intrinsics), picked at run time by what the CPU says it runs. */
#include "gelu_vec.h"

#include <math.h>
#include <string.h>

#include "isa.h"

#define GV_C 0.7978845608028654f   /* √(2/π) */
#define GV_K 0.044715f

/* ---- plain C: the reference every copy matches to the bit ---------------------------- */

static float c_tanh_u(float u) {
    const float a = fabsf(u), x = (a < 20.0f ? a : 20.0f) * -2.0f;   /* NaN → 20, as the vector min */
    const float shift = 12582912.0f;
    const float n = fmaf(x, 1.44269504f, shift) - shift;
    const float r = fmaf(n, 2.12194440e-4f, fmaf(n, -0.693359375f, x)), r2 = r * r, r4 = r2 * r2;
    const float lo = fmaf(fmaf(r, 1.0f / 6, 0.5f), r2, r + 1.0f);
    const float hi = fmaf(fmaf(r, 1.0f / 5040, 1.0f / 720), r2, fmaf(r, 1.0f / 120, 1.0f / 24));
    const int32_t bits = ((int32_t)n + 127) << 23;   /* 2^n, n in [−58, 0] */
    float p2;
    memcpy(&p2, &bits, sizeof p2);
    const float e = fmaf(hi, r4, lo) * p2;
    return copysignf((1.0f - e) / (1.0f + e), u);
}

static float c_gelu(float v) {
    const float u = (GV_C * v) * fmaf(v * v, GV_K, 1.0f);
    return (0.5f * v) * (1.0f + c_tanh_u(u));
}

static float c_grad(float v) {
    const float v2 = v * v, t = c_tanh_u((GV_C * v) * fmaf(v2, GV_K, 1.0f));
    const float du = GV_C * fmaf(v2, 3.0f * GV_K, 1.0f);
    return fmaf((0.5f * v) * fmaf(-t, t, 1.0f), du, fmaf(0.5f, t, 0.5f));
}

static void c_fwd(const float *x, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = c_gelu(b ? x[i] + b[i] : x[i]);
}

static void c_bwd(const float *x, const float *b, const float *g, float *dx, float *db, int64_t n, int add) {
    for (int64_t i = 0; i < n; i++) {
        const float d = g[i] * c_grad(b ? x[i] + b[i] : x[i]);
        if (dx) dx[i] = add ? dx[i] + d : d;
        if (db) db[i] += d;
    }
}

static const tg_gelu_ops c_ops = {"c", c_fwd, c_bwd};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TG_GELU_X86 1
#include <immintrin.h>

/* ---- AVX-512 ------------------------------------------------------------------------ */
#define GV(name) avx512_##name
#define GV_NAME "avx512"
#define GV_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma,avx2")))
#define GV_W 16
#define V __m512
#define M __mmask16
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOADM(p, m) _mm512_maskz_loadu_ps(m, p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_STOREM(p, m, x) _mm512_mask_storeu_ps(p, m, x)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)   /* c − a·b, one rounding */
#define V_MIN(a, b) _mm512_min_ps(a, b)             /* a < b ? a : b */
#define V_ABS(a) _mm512_abs_ps(a)
#define V_COPYSIGN(a, s) \
    _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(a), _mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN), 0xd8))
#define V_POW2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23))
#define M_FIRST(k) ((__mmask16)((1u << (k)) - 1))
#include "gelu_vec_isa.h"
#undef GV
#undef GV_NAME
#undef GV_TARGET
#undef GV_W
#undef V
#undef M
#undef V_SET1
#undef V_LOAD
#undef V_LOADM
#undef V_STORE
#undef V_STOREM
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_DIV
#undef V_FMA
#undef V_FNMA
#undef V_MIN
#undef V_ABS
#undef V_COPYSIGN
#undef V_POW2
#undef M_FIRST

/* ---- AVX2 + FMA --------------------------------------------------------------------- */
#define GV(name) avx2_##name
#define GV_NAME "avx2"
#define GV_TARGET __attribute__((target("avx2,fma")))
#define GV_W 8
#define V __m256
#define M __m256i
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADM(p, m) _mm256_maskload_ps(p, m)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_STOREM(p, m, x) _mm256_maskstore_ps(p, m, x)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_ABS(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a)
#define V_COPYSIGN(a, s) _mm256_or_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a), _mm256_and_ps(_mm256_set1_ps(-0.0f), s))
#define V_POW2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23))
#define M_FIRST(k) _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#include "gelu_vec_isa.h"
#endif

const tg_gelu_ops *tg_gelu_ops_for(int isa) {
    switch (tg_isa_pick(isa)) {
#ifdef TG_GELU_X86
    case 1: return &avx512_ops;
    case 2: return &avx2_ops;
#endif
    case 3: return &c_ops;
    default: return NULL;
    }
}
