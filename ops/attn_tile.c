/* The attention tiles (attn_tile.h): a copy in plain C, and on x86-64 with
 * GCC one for AVX-512 and one for AVX2+FMA (attn_tile_isa.h with each ISA's
 * intrinsics), compiled for their targets in this one file and picked at run
 * time by what the CPU says it runs. */
#include "attn_tile.h"

#include <math.h>
#include <string.h>

#include "isa.h"
#include "vmath.h"

/* ---- plain C: the reference every copy matches to the bit ---------------------------- */

static void c_gemm(int M, int N, int K, float alpha, const float *A, int64_t ars, int64_t acs, const float *B,
                   int64_t ldb, float *C, int64_t ldc, int add) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(A[m * ars + k * acs], B[k * ldb + n], acc);
            float x = alpha != 1.0f ? acc * alpha : acc;
            C[m * ldc + n] = add ? C[m * ldc + n] + x : x;
        }
}

/* the sum by blocks of 8 keys: in float within a block, keys 0, 2, 4, … and 1, 3, 5, … apart,
 * each block's two sums then added in double; the two added at the end: the vector copies' order */
static void c_softmax(float *S, int64_t lds, int nk, int k0, const int *lo, const int *hi, int raw, float s, float sink,
                      float *top, float *psink) {
    for (int a = 0; a < TG_TILE_Q; a++) {
        float mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            float *x = S + j * lds + a;
            if (raw) *x = k0 + j >= lo[a] && k0 + j < hi[a] ? *x * s : -INFINITY;
            mx = *x > mx ? *x : mx;
        }
        const float t = mx > sink ? mx : sink, m = t == -INFINITY ? 0.0f : t;
        double l[2] = {0, 0};
        float f[2] = {0, 0};
        for (int j = 0; j < nk; j++) {
            float *x = S + j * lds + a;
            *x = tg_exp_neg_fma(*x - m);
            f[j & 1] += *x;
            if (j % 8 == 7 || j == nk - 1) l[0] += f[0], l[1] += f[1], f[0] = f[1] = 0;
        }
        const float es = sink > -INFINITY ? tg_exp_neg_fma(sink - m) : 0.0f;
        const double z = l[0] + l[1] + es;
        float inv = (float)(1.0 / z);
        top[a] = mx;
        if (t == -INFINITY) {
            if (inv != inv) top[a] = inv;
            else inv = 0.0f;
        }
        if (psink) psink[a] = t == -INFINITY ? 0.0f : (float)(es / z);
        for (int j = 0; j < nk; j++) S[j * lds + a] *= inv;
    }
}

static void c_dsoftmax(float *G, const float *P, int64_t ld, int nk, float *D) {
    for (int a = 0; a < TG_TILE_Q; a++) {
        double l[2] = {0, 0};   /* blocks of 8 keys, as the softmax's sum */
        float f[2] = {0, 0};
        for (int j = 0; j < nk; j++) {
            f[j & 1] = fmaf(P[j * ld + a], G[j * ld + a], f[j & 1]);
            if (j % 8 == 7 || j == nk - 1) l[0] += f[0], l[1] += f[1], f[0] = f[1] = 0;
        }
        D[a] = (float)(l[0] + l[1]);
        for (int j = 0; j < nk; j++) G[j * ld + a] = P[j * ld + a] * (G[j * ld + a] - D[a]);
    }
}

static void c_transpose(const float *X, int64_t ldx, int rows, int cols, float *Y, int64_t ldy) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) Y[c * ldy + r] = X[r * ldx + c];
}

static const tg_tile_ops c_ops = {"c", c_gemm, c_softmax, c_dsoftmax, c_transpose};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TG_TILE_X86 1
#include <immintrin.h>

/* ---- AVX-512 ------------------------------------------------------------------------ */
#define TT(name) avx512_##name
#define TT_NAME "avx512"
#define TT_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma,avx2")))
#define TT_W 16
/* Blocks of C as experiments/bench_blocks times them (AMD EPYC Zen 5, hot in L1, K
 * 64, two runs): 8×3 vectors 99-102% of the FMA peak (measured beside them), 8×2 98%,
 * 6×4 99-101%, 12×2 98-99%, 4×4 77-78%, 4×3 70%, 16×1 77-87%, 8×1 74-77%: a block
 * wants 16-24 accumulators and few loads an FMA (a block one vector wide loads a
 * float of A per FMA). 6×4 would serve N 64
 * as well, but 16 rows (a tile) are 8 + 8, and 6 + 6 + 4 ends in a 4×4. On AMD
 * family 19h the products a tile wide run in 4-row blocks instead ("-r4",
 * tg_tile_ops_for below). */
#define TT_NVMAX 3
#define TT_MR(nv) ((nv) == 1 ? 16 : 8)
#define V __m512
#define VI __m512i
#define VD __m512d
#define M_T __mmask16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOADM(p, m) _mm512_maskz_loadu_ps(m, p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_STOREM(p, m, x) _mm512_mask_storeu_ps(p, m, x)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)   /* c − a·b, one rounding */
/* p·2ⁿ for n a whole number in [−126, 0]: one instruction, rounded as the product by 2ⁿ built in the exponent bits */
#define V_SCALE(p, n) _mm512_scalef_ps(p, n)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_NGE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_NGE_UQ)   /* !(a >= b): below, or NaN */
#define V_NAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define V_SEL(m, a, b) _mm512_mask_blend_ps(m, b, a)   /* m ? a : b */
#define V_POW2(n) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23))
#define M_FIRST(n) ((__mmask16)((1u << (n)) - 1))
#define VI_SET1(x) _mm512_set1_epi32(x)
#define VI_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VI_IN(lo, hi, j) ((__mmask16)(_mm512_cmple_epi32_mask(lo, j) & _mm512_cmpgt_epi32_mask(hi, j)))
#define VD_ZERO() _mm512_setzero_pd()
#define VD_ADD(a, b) _mm512_add_pd(a, b)
#define VD_MUL(a, b) _mm512_mul_pd(a, b)
#define VD_DIV(a, b) _mm512_div_pd(a, b)
#define VD_SET1(x) _mm512_set1_pd(x)
#define VD_TO_V(lo, hi) _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1)
#define V_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define M_AND(a, b) ((__mmask16)((a) & (b)))
#define M_ANDN(a, b) ((__mmask16)(~(a) & (b)))   /* !a && b */
#define VD_LO(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))
#define VD_HI(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
#define VD_STORE(p, x) _mm512_storeu_pd(p, x)
/* 16 rows of 16: pairs interleaved, then pairs of pairs, then 128-bit lanes twice */
#define V_TRANSPOSE(r)                                                                            \
    do {                                                                                          \
        __m512 t_[16];                                                                            \
        _Pragma("GCC unroll 8") for (int i_ = 0; i_ < 8; i_++) {                                  \
            t_[2 * i_] = _mm512_unpacklo_ps(r[2 * i_], r[2 * i_ + 1]);                            \
            t_[2 * i_ + 1] = _mm512_unpackhi_ps(r[2 * i_], r[2 * i_ + 1]);                        \
        }                                                                                         \
        _Pragma("GCC unroll 4") for (int i_ = 0; i_ < 4; i_++) {                                  \
            __m512d a_ = _mm512_castps_pd(t_[4 * i_]), b_ = _mm512_castps_pd(t_[4 * i_ + 1]);     \
            __m512d c_ = _mm512_castps_pd(t_[4 * i_ + 2]), d_ = _mm512_castps_pd(t_[4 * i_ + 3]); \
            r[4 * i_] = _mm512_castpd_ps(_mm512_unpacklo_pd(a_, c_));                             \
            r[4 * i_ + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a_, c_));                         \
            r[4 * i_ + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b_, d_));                         \
            r[4 * i_ + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b_, d_));                         \
        }                                                                                         \
        _Pragma("GCC unroll 4") for (int i_ = 0; i_ < 4; i_++) {                                  \
            t_[i_] = _mm512_shuffle_f32x4(r[i_], r[4 + i_], 0x88);                                \
            t_[4 + i_] = _mm512_shuffle_f32x4(r[i_], r[4 + i_], 0xdd);                            \
            t_[8 + i_] = _mm512_shuffle_f32x4(r[8 + i_], r[12 + i_], 0x88);                       \
            t_[12 + i_] = _mm512_shuffle_f32x4(r[8 + i_], r[12 + i_], 0xdd);                      \
        }                                                                                         \
        _Pragma("GCC unroll 8") for (int i_ = 0; i_ < 8; i_++) {                                  \
            r[i_] = _mm512_shuffle_f32x4(t_[i_], t_[8 + i_], 0x88);                               \
            r[8 + i_] = _mm512_shuffle_f32x4(t_[i_], t_[8 + i_], 0xdd);                           \
        }                                                                                         \
    } while (0)
#include "attn_tile_isa.h"
#undef TT
#undef TT_NAME
#undef TT_TARGET
#undef TT_W
#undef TT_NVMAX
#undef TT_MR
#undef V
#undef VI
#undef VD
#undef M_T
#undef V_ZERO
#undef V_SET1
#undef V_LOAD
#undef V_LOADM
#undef V_STORE
#undef V_STOREM
#undef V_FMA
#undef V_FNMA
#undef V_SCALE
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_NGE
#undef V_NAN
#undef V_SEL
#undef V_POW2
#undef M_FIRST
#undef VI_SET1
#undef VI_LOAD
#undef VI_IN
#undef VD_ZERO
#undef VD_ADD
#undef VD_MUL
#undef VD_DIV
#undef VD_SET1
#undef VD_TO_V
#undef V_EQ
#undef M_AND
#undef M_ANDN
#undef VD_LO
#undef VD_HI
#undef VD_STORE
#undef V_TRANSPOSE

/* ---- AVX2 + FMA --------------------------------------------------------------------- */
#define TT(name) avx2_##name
#define TT_NAME "avx2"
#define TT_TARGET __attribute__((target("avx2,fma")))
#define TT_W 8
/* The same for AVX2 (same machine, of the 256-bit peak): 4×3 100-101%, 6×2 98-101%,
 * 12×1 91-93%, 3×3 87%, 8×1 87-89%, 4×2 78-82% */
#define TT_NVMAX 3
#define TT_MR(nv) ((nv) == 1 ? 12 : (nv) == 2 ? 6 : 4)   /* ≤ 12 accumulators of the 16 registers */
#define V __m256
#define VI __m256i
#define VD __m256d
#define M_T __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADM(p, m) _mm256_maskload_ps(p, _mm256_castps_si256(m))
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_STOREM(p, m, x) _mm256_maskstore_ps(p, _mm256_castps_si256(m), x)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_SCALE(p, n) V_MUL(p, V_POW2(n))
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_NGE(a, b) _mm256_cmp_ps(a, b, _CMP_NGE_UQ)   /* !(a >= b): below, or NaN */
#define V_NAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define V_SEL(m, a, b) _mm256_blendv_ps(b, a, m)   /* m ? a : b */
#define V_POW2(n) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23))
#define M_FIRST(n) \
    _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)))
#define VI_SET1(x) _mm256_set1_epi32(x)
#define VI_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define VI_IN(lo, hi, j) _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(lo, j), _mm256_cmpgt_epi32(hi, j)))
#define VD_ZERO() _mm256_setzero_pd()
#define VD_ADD(a, b) _mm256_add_pd(a, b)
#define VD_MUL(a, b) _mm256_mul_pd(a, b)
#define VD_DIV(a, b) _mm256_div_pd(a, b)
#define VD_SET1(x) _mm256_set1_pd(x)
#define VD_TO_V(lo, hi) _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1)
#define V_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define M_AND(a, b) _mm256_and_ps(a, b)
#define M_ANDN(a, b) _mm256_andnot_ps(a, b)   /* !a && b */
#define VD_LO(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))
#define VD_HI(x) _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))
#define VD_STORE(p, x) _mm256_storeu_pd(p, x)
#define V_TRANSPOSE(r)                                                                     \
    do {                                                                                   \
        __m256 t_[8];                                                                      \
        _Pragma("GCC unroll 4") for (int i_ = 0; i_ < 4; i_++) {                           \
            t_[2 * i_] = _mm256_unpacklo_ps(r[2 * i_], r[2 * i_ + 1]);                     \
            t_[2 * i_ + 1] = _mm256_unpackhi_ps(r[2 * i_], r[2 * i_ + 1]);                 \
        }                                                                                  \
        _Pragma("GCC unroll 2") for (int i_ = 0; i_ < 2; i_++) {                           \
            r[4 * i_] = _mm256_shuffle_ps(t_[4 * i_], t_[4 * i_ + 2], 0x44);               \
            r[4 * i_ + 1] = _mm256_shuffle_ps(t_[4 * i_], t_[4 * i_ + 2], 0xee);           \
            r[4 * i_ + 2] = _mm256_shuffle_ps(t_[4 * i_ + 1], t_[4 * i_ + 3], 0x44);       \
            r[4 * i_ + 3] = _mm256_shuffle_ps(t_[4 * i_ + 1], t_[4 * i_ + 3], 0xee);       \
        }                                                                                  \
        _Pragma("GCC unroll 4") for (int i_ = 0; i_ < 4; i_++) {                           \
            t_[i_] = _mm256_permute2f128_ps(r[i_], r[4 + i_], 0x20);                       \
            t_[4 + i_] = _mm256_permute2f128_ps(r[i_], r[4 + i_], 0x31);                   \
        }                                                                                  \
        _Pragma("GCC unroll 8") for (int i_ = 0; i_ < 8; i_++) r[i_] = t_[i_];             \
    } while (0)
#include "attn_tile_isa.h"
#endif

#ifdef TG_TILE_X86
/* Each vector copy comes twice: its products a tile wide (16 floats: d 16, or one
 * query tile) in blocks of TT_MR rows, or of 4 ("-r4"). On an AMD EPYC Zen 4 (family
 * 19h: one 512-bit FMA a cycle, in two 256-bit halves) 4 rows ran the op at
 * small's shape (d 16, every product a tile wide, k 16-32) from 45.8% of the FMA
 * peak to 49.0% on AVX-512 and from 39.2% to 43.4% on AVX2 (no BLAS in the op; the
 * step on OpenBLAS Cooperlake, libxsmm cpx / hsw), seed's and large's not
 * slower (scripts/bench_tiles.sh, docs/speed.md): there isa 0 takes them. Zen 3
 * (19h too, AVX2 only) is taken as its successor's 256-bit core, not measured;
 * Zen 5 (1Ah) and Intel keep TT_MR's blocks, as measured on a Zen 5. */
static int rows4_cpu(void) { return __builtin_cpu_is("amd") && __builtin_cpu_is("amdfam19h"); }
#endif

const tg_tile_ops *tg_tile_ops_for(int isa) {
#ifdef TG_TILE_X86
    if (isa == 4) return tg_isa_pick(1) == 1 ? &avx512_ops_r4 : NULL;
    if (isa == 5) return tg_isa_pick(2) == 2 ? &avx2_ops_r4 : NULL;
#endif
    switch (tg_isa_pick(isa)) {
#ifdef TG_TILE_X86
    case 1: return isa == 0 && rows4_cpu() ? &avx512_ops_r4 : &avx512_ops;
    case 2: return isa == 0 && rows4_cpu() ? &avx2_ops_r4 : &avx2_ops;
#endif
    case 3: return &c_ops;
    default: return NULL;
    }
}
