/* bench_gelu: GELU's loops, 0.19.0's against the ops' (ops/gelu_vec.h), and
 * what the exp costs. Times, per ISA, one thread, --rows × --cols (by default
 * the small step's MLP, 512 KB an array), the bias added as tg_bias_gelu does:
 *   0.19   the loops tg_bias_gelu ran in 0.19.0: tanh by 0.19.0's vmath.h
 *          (tg_exp_neg, Horner's seven multiply-adds, no FMA) under omp simd;
 *   noexp  the same with e^{−2|u|} replaced by −2|u| (wrong results): what
 *          the exp costs there;
 *   ops    the ops' loops now: gelu_vec.h's copy for the ISA (FMAs, Estrin).
 * forward y = gelu(x + b); backward dx = g · gelu'(x + b) (written, not added).
 * Prints "isa pass path ns_per_elem max_abs_err" lines (the error against the
 * tanh form in double; "-" for noexp, whose values are wrong) and, per ISA
 * and pass, the ratios 0.19/ops and 0.19/noexp: medians of --rounds
 * alternating rounds.
 *   bench_gelu [--rows N] [--cols N] [--rounds N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gelu_vec.h"
#include "tg_cli.h"
#include "tg_profile.h"
#include "vmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define GELU_C 0.7978845608028654f   /* √(2/π) */
#define GELU_K 0.044715f

/* 0.19.0's tanh (vmath.h's tg_tanh_f); without its exp for noexp */
static inline float tanh_019(float u, int with_exp) {
    float a = fabsf(u);
    int32_t ab;
    memcpy(&ab, &a, sizeof ab);
    ab = ab < 0x41a00000 ? ab : 0x41a00000;   /* 20.0f */
    memcpy(&a, &ab, sizeof a);
    const float e = with_exp ? tg_exp_neg(-2.0f * a) : -2.0f * a;
    return copysignf((1.0f - e) / (1.0f + e), u);
}
static inline float gelu_019(float v) { return 0.5f * v * (1.0f + tanh_019(GELU_C * (v + GELU_K * v * v * v), 1)); }
static inline float gelu_noexp(float v) { return 0.5f * v * (1.0f + tanh_019(GELU_C * (v + GELU_K * v * v * v), 0)); }
static inline float grad_019(float v, int with_exp) {
    const float t = tanh_019(GELU_C * (v + GELU_K * v * v * v), with_exp);
    const float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}
static inline float gelu_grad_019(float v) { return grad_019(v, 1); }
static inline float gelu_grad_noexp(float v) { return grad_019(v, 0); }

/* 0.19.0's loops (ops/bias_gelu.c) on element functions F (forward) and G (its
 * derivative): 0.19.0's own, or the noexp twins; one copy per ISA */
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
LOOPS(v019, 512, "arch=x86-64-v4", gelu_019, gelu_grad_019)
LOOPS(v019, 256, "avx2", gelu_019, gelu_grad_019)
LOOPS(noexp, 512, "arch=x86-64-v4", gelu_noexp, gelu_grad_noexp)
LOOPS(noexp, 256, "avx2", gelu_noexp, gelu_grad_noexp)

typedef void (*fwd_fn)(const float *, const float *, float *, int, int);
typedef void (*bwd_fn)(const float *, const float *, const float *, float *, int, int);
/* a 0.19.0 or noexp loop (fwd, bwd), or the ops' copy for isa (fwd NULL) */
typedef struct { const char *isa, *path; fwd_fn fwd; bwd_fn bwd; int copy; } variant;
static const variant variants[] = {
    {"avx512", "0.19", v019_fwd_512, v019_bwd_512, 1}, {"avx512", "noexp", noexp_fwd_512, noexp_bwd_512, 1},
    {"avx512", "ops", NULL, NULL, 1},                   {"avx2", "0.19", v019_fwd_256, v019_bwd_256, 2},
    {"avx2", "noexp", noexp_fwd_256, noexp_bwd_256, 2}, {"avx2", "ops", NULL, NULL, 2},
};
/* one pass over the rows: the ops' copies as tg_bias_gelu calls them, a row at a time */
static void run(const variant *w, int pass, const float *x, const float *b, const float *g, float *y, int rows, int D) {
    const tg_gelu_ops *k = tg_gelu_ops_for(w->copy);
    if (w->fwd && pass == 0) w->fwd(x, b, y, rows, D);
    else if (w->fwd) w->bwd(x, b, g, y, rows, D);
    else if (pass == 0)
        for (int r = 0; r < rows; r++) k->fwd(x + (int64_t)r * D, b, y + (int64_t)r * D, D);
    else
        for (int r = 0; r < rows; r++) k->bwd(x + (int64_t)r * D, b, g + (int64_t)r * D, y + (int64_t)r * D, NULL, D, 0);
}
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
        tg_cli_usage(stdout, "bench_gelu", "Time GELU's loops: 0.19.0's, the same without the exp, the ops'.", opts, 3);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_gelu: %s\n", err);
        return 2;
    }
    if (cols % 16) {
        fprintf(stderr, "bench_gelu: --cols %d is not a multiple of 16 (0.19.0's loops are timed on whole vectors)\n", cols);
        return 2;
    }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
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
            if (!tg_gelu_ops_for(w->copy)) continue;   /* this CPU or build lacks the ISA */
            for (int pass = 0; pass < 2; pass++) {
                const double t0 = tg_profile_clock();
                for (int k = 0; k < calls; k++) run(w, pass, x, b, g, y, rows, cols);
                times[v][pass][r] = (tg_profile_clock() - t0) / ((double)calls * n) * 1e9;
            }
        }
    for (int v = 0; v < NV; v++) {
        const variant *w = &variants[v];
        if (!tg_gelu_ops_for(w->copy)) continue;
        for (int pass = 0; pass < 2; pass++) {
            memcpy(t, times[v][pass], (size_t)rounds * sizeof *t);
            qsort(t, (size_t)rounds, sizeof *t, cmp_double);
            med[v][pass] = t[rounds / 2];
            run(w, pass, x, b, g, y, rows, cols);
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
            printf("# %s: 0.19/ops %.2f forward, %.2f backward; 0.19/noexp %.2f forward, %.2f backward\n", variants[v].isa,
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
