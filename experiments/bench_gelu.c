/* bench_gelu: is GELU's exp the limit of tg_bias_gelu, and what would FMAs buy?
 * Times, per ISA, one thread, --rows × --cols (by default the small step's MLP,
 * 512 KB an array), the bias added as tg_bias_gelu does:
 *   ops    the loops ops/bias_gelu.c runs: vmath.h's tg_gelu_f / tg_gelu_grad_f
 *          under omp simd (no FMA: ISO C does not contract, and GCC does not
 *          vectorise fmaf, so every clone gives the same bits);
 *   noexp  the same loops with e^{−2|u|} replaced by −2|u| (wrong results):
 *          what the exp costs;
 *   fma    a prototype in intrinsics, not used by any op: u = C·v·(1 + K v²),
 *          e^x by FMAs (Horner's 7 steps as Estrin's 3), tanh = (1 − e)/(1 + e).
 * forward y = gelu(x + b); backward dx = g · gelu'(x + b) (written, not added).
 * Prints "isa pass path ns_per_elem max_abs_err" lines (the error against the
 * tanh form in double; "-" for noexp, whose values are wrong)
 * and, per ISA and pass, the ratios ops/fma and ops/noexp: medians of --rounds
 * alternating rounds.
 *   bench_gelu [--rows N] [--cols N] [--rounds N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_cli.h"
#include "tg_profile.h"
#include "vmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

/* tg_tanh_f without its exp: the noexp row */
static inline float tanh_noexp(float u) {
    float a = fabsf(u);
    int32_t ab;
    memcpy(&ab, &a, sizeof ab);
    ab = ab < 0x41a00000 ? ab : 0x41a00000;
    memcpy(&a, &ab, sizeof a);
    const float e = -2.0f * a;
    return copysignf((1.0f - e) / (1.0f + e), u);
}
static inline float gelu_noexp(float v) {
    return 0.5f * v * (1.0f + tanh_noexp(TG_GELU_C * (v + TG_GELU_K * v * v * v)));
}
static inline float gelu_grad_noexp(float v) {
    const float t = tanh_noexp(TG_GELU_C * (v + TG_GELU_K * v * v * v));
    const float du = TG_GELU_C * (1.0f + 3.0f * TG_GELU_K * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

/* The ops' loops (ops/bias_gelu.c) on element functions F (forward) and G (its
 * derivative): the ops' own, or the noexp twins; one copy per ISA */
#define LOOPS(PATH, SFX, TGT, F, G)                                                                                \
    __attribute__((target(TGT), noinline)) static void PATH##_fwd_##SFX(const float *x, const float *b, float *y,  \
                                                                          int rows, int D) {                       \
        for (int r = 0; r < rows; r++) {                                                                           \
            _Pragma("omp simd") for (int c = 0; c < D; c++) y[r * D + c] = F(x[r * D + c] + b[c]);                \
        }                                                                                                          \
    }                                                                                                              \
    __attribute__((target(TGT), noinline)) static void PATH##_bwd_##SFX(const float *x, const float *b,           \
                                                                          const float *g, float *dx, int rows, int D) { \
        for (int r = 0; r < rows; r++) {                                                                           \
            _Pragma("omp simd") for (int c = 0; c < D; c++) dx[r * D + c] = g[r * D + c] * G(x[r * D + c] + b[c]); \
        }                                                                                                          \
    }
LOOPS(ops, 512, "arch=x86-64-v4", tg_gelu_f, tg_gelu_grad_f)
LOOPS(ops, 256, "avx2", tg_gelu_f, tg_gelu_grad_f)
LOOPS(noexp, 512, "arch=x86-64-v4", gelu_noexp, gelu_grad_noexp)
LOOPS(noexp, 256, "avx2", gelu_noexp, gelu_grad_noexp)

/* The prototype, written once over the vector macros of each ISA */
#define PROTO(SFX, TGT, V, W, SET1, LOAD, STORE, ADD, SUB, MUL, DIV, FMA, MIN, ABS, COPYSIGN, POW2)                \
    __attribute__((target(TGT), always_inline)) static inline V tanh_##SFX(V u) {                                 \
        const V x = MUL(MIN(ABS(u), SET1(20.0f)), SET1(-2.0f)); /* e^x, x in [−40, 0]: no clamp */               \
        const V sh = SET1(12582912.0f), n = SUB(FMA(x, SET1(1.44269504f), sh), sh);                              \
        const V r = FMA(n, SET1(2.12194440e-4f), FMA(n, SET1(-0.693359375f), x)), r2 = MUL(r, r), r4 = MUL(r2, r2); \
        const V b0 = FMA(FMA(r, SET1(1.0f / 6), SET1(0.5f)), r2, ADD(r, SET1(1.0f)));                             \
        const V b1 = FMA(FMA(r, SET1(1.0f / 5040), SET1(1.0f / 720)), r2, FMA(r, SET1(1.0f / 120), SET1(1.0f / 24))); \
        const V e = MUL(FMA(b1, r4, b0), POW2(n));                                                                 \
        return COPYSIGN(DIV(SUB(SET1(1.0f), e), ADD(SET1(1.0f), e)), u);                                           \
    }                                                                                                              \
    __attribute__((target(TGT), noinline)) static void fma_fwd_##SFX(const float *x, const float *b, float *y,    \
                                                                       int rows, int D) {                          \
        for (int r = 0; r < rows; r++)                                                                             \
            for (int c = 0; c < D; c += W) {                                                                       \
                const V v = ADD(LOAD(x + r * D + c), LOAD(b + c));                                                 \
                const V u = MUL(MUL(SET1(TG_GELU_C), v), FMA(MUL(v, v), SET1(TG_GELU_K), SET1(1.0f)));           \
                STORE(y + r * D + c, MUL(MUL(SET1(0.5f), v), ADD(SET1(1.0f), tanh_##SFX(u))));                   \
            }                                                                                                      \
    }                                                                                                              \
    __attribute__((target(TGT), noinline)) static void fma_bwd_##SFX(const float *x, const float *b,              \
                                                                       const float *g, float *dx, int rows, int D) { \
        for (int r = 0; r < rows; r++)                                                                             \
            for (int c = 0; c < D; c += W) {                                                                       \
                const V v = ADD(LOAD(x + r * D + c), LOAD(b + c)), v2 = MUL(v, v);                                 \
                const V t = tanh_##SFX(MUL(MUL(SET1(TG_GELU_C), v), FMA(v2, SET1(TG_GELU_K), SET1(1.0f))));      \
                const V du = MUL(SET1(TG_GELU_C), FMA(v2, SET1(3.0f * TG_GELU_K), SET1(1.0f)));                   \
                const V hv = MUL(SET1(0.5f), v); /* ½(1 + t) + ½v (1 − t²) du */                                   \
                const V d = FMA(MUL(hv, FMA(t, SUB(SET1(0.0f), t), SET1(1.0f))), du, FMA(SET1(0.5f), t, SET1(0.5f))); \
                STORE(dx + r * D + c, MUL(LOAD(g + r * D + c), d));                                               \
            }                                                                                                      \
    }

#define P512_COPYSIGN(a, s) \
    _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(a), _mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN), 0xd8))
#define P512_POW2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
PROTO(512, "arch=x86-64-v4", __m512, 16, _mm512_set1_ps, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_add_ps, _mm512_sub_ps,
      _mm512_mul_ps, _mm512_div_ps, _mm512_fmadd_ps, _mm512_min_ps, _mm512_abs_ps, P512_COPYSIGN, P512_POW2)
#define P256_ABS(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a)
#define P256_COPYSIGN(a, s) _mm256_or_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a), _mm256_and_ps(_mm256_set1_ps(-0.0f), s))
#define P256_POW2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
PROTO(256, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps,
      _mm256_mul_ps, _mm256_div_ps, _mm256_fmadd_ps, _mm256_min_ps, P256_ABS, P256_COPYSIGN, P256_POW2)

typedef void (*fwd_fn)(const float *, const float *, float *, int, int);
typedef void (*bwd_fn)(const float *, const float *, const float *, float *, int, int);
typedef struct { const char *isa, *path; fwd_fn fwd; bwd_fn bwd; } variant;
static const variant variants[] = {
    {"avx512", "ops", ops_fwd_512, ops_bwd_512},   {"avx512", "noexp", noexp_fwd_512, noexp_bwd_512},
    {"avx512", "fma", fma_fwd_512, fma_bwd_512},   {"avx2", "ops", ops_fwd_256, ops_bwd_256},
    {"avx2", "noexp", noexp_fwd_256, noexp_bwd_256}, {"avx2", "fma", fma_fwd_256, fma_bwd_256},
};
enum { NV = sizeof variants / sizeof *variants };

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the tanh form and its derivative in double */
static double ref_gelu(double v, int grad) {
    const double C = 0.7978845608028654, K = 0.044715, t = tanh(C * (v + K * v * v * v));
    return grad ? 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * C * (1 + 3 * K * v * v) : 0.5 * v * (1 + t);
}
#endif

int main(int argc, char **argv) {
    int rows = 512, cols = 256, rounds = 31;
    const tg_cli_opt opts[] = {
        {"rows", TG_CLI_INT, &rows, 1, 1 << 16, NULL, "rows (the small step's MLP: B 16 × T 32)"},
        {"cols", TG_CLI_INT, &cols, 16, 1 << 16, NULL, "columns, a multiple of 16 (the small step's MLP: 4 × 64)"},
        {"rounds", TG_CLI_INT, &rounds, 1, 1001, NULL, "alternating rounds (medians are reported)"},
    };
    char err[256];
    const int rc = tg_cli_parse(opts, 3, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "bench_gelu", "Time GELU's loops: the ops', without the exp, and an FMA prototype.", opts, 3);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_gelu: %s\n", err);
        return 2;
    }
    if (cols % 16) {
        fprintf(stderr, "bench_gelu: --cols %d is not a multiple of 16 (the prototype has no tail)\n", cols);
        return 2;
    }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    const int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    const int has256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const size_t n = (size_t)rows * cols;
    float *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *b = malloc((size_t)cols * sizeof *b);
    float *y = malloc(n * sizeof *y);
    double *t = malloc((size_t)rounds * sizeof *t), med[NV][2];
    if (!x || !g || !b || !y || !t) return fprintf(stderr, "bench_gelu: out of memory\n"), 1;
    uint64_t s = 42;   /* x + b uniform in [−6, 6): both tails of tanh and the curve between */
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) * 0x1p-24 * 11.0 - 5.5);
        g[i] = (float)((s >> 20 & 0xfffff) * 0x1p-20);
    }
    for (int c = 0; c < cols; c++) b[c] = (float)(c % 11) * 0.1f - 0.5f;
    const int calls = (int)(2e6 / (double)n) + 1;   /* a round: ~2M elements a variant and pass */
    for (int v = 0; v < NV; v++) med[v][0] = med[v][1] = 0;
    double times[NV][2][1001];
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < NV; v++) {
            const variant *w = &variants[v];
            if (w->isa[4] == '5' ? !has512 : !has256) continue;
            for (int pass = 0; pass < 2; pass++) {
                const double t0 = tg_profile_clock();
                for (int k = 0; k < calls; k++)
                    if (pass == 0) w->fwd(x, b, y, rows, cols);
                    else w->bwd(x, b, g, y, rows, cols);
                times[v][pass][r] = (tg_profile_clock() - t0) / ((double)calls * n) * 1e9;
            }
        }
    for (int v = 0; v < NV; v++) {
        const variant *w = &variants[v];
        if (w->isa[4] == '5' ? !has512 : !has256) continue;
        for (int pass = 0; pass < 2; pass++) {
            memcpy(t, times[v][pass], (size_t)rounds * sizeof *t);
            qsort(t, (size_t)rounds, sizeof *t, cmp_double);
            med[v][pass] = t[rounds / 2];
            if (pass == 0) w->fwd(x, b, y, rows, cols);
            else w->bwd(x, b, g, y, rows, cols);
            double e = 0;
            for (size_t i = 0; i < n; i++) {
                const double want = ref_gelu((double)(x[i] + b[i % cols]), pass) * (pass ? g[i] : 1.0f);
                e = fabs(y[i] - want) > e ? fabs(y[i] - want) : e;
            }
            char es[32] = "-";   /* noexp's values are wrong by design */
            if (strcmp(w->path, "noexp")) snprintf(es, sizeof es, "%.2g", e);
            printf("%s %s %s %.3f %s\n", w->isa, pass ? "backward" : "forward", w->path, med[v][pass], es);
        }
    }
    for (int v = 0; v + 2 < NV; v += 3)
        if (med[v][0] > 0)
            printf("# %s: ops/fma %.2f forward, %.2f backward; ops/noexp %.2f forward, %.2f backward\n", variants[v].isa,
                   med[v][0] / med[v + 2][0], med[v][1] / med[v + 2][1], med[v][0] / med[v + 1][0],
                   med[v][1] / med[v + 1][1]);
    printf("# isa pass path ns_per_elem max_abs_err: medians of %d alternating rounds, %d×%d, 1 thread\n", rounds, rows,
           cols);
    free(x), free(g), free(b), free(y), free(t);
#else
    puts("# bench_gelu: x86-64 with GCC only");
#endif
    return 0;
}
