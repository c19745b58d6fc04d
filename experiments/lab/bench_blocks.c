/* bench_blocks: which register block a small product with a broadcast A should
 * use (ops/attn_tile.h's gemm): C [MR rows × NV vectors] += A B over k, B a row
 * of NV vectors, A one float a row broadcast, everything hot in L1 (K 64, or
 * --k: the attention tiles' products at d 16-32 run k 16-32, where what a block
 * costs beside its loop shows), one thread; each candidate's share of the FMA
 * peak at its width (the kit's tg_timing_fma_gflops). B's rows are 64 floats
 * apart, as a head's rows at d 16 and H 4 (at 512 floats, as before 0.19.4, the
 * narrow blocks' rows fell in two sets of the L1 and missed it: this program
 * with 4×1 added timed it at 38-52% of the peak so, 98-100% now, on an AMD EPYC
 * Zen 4). The blocks the tiles
 * use came from this table, but for one: A here is one contiguous row a k, where
 * the tiles' gemm reads A by strides and writes C by ldc, and there on a Zen 4
 * 4×1 blocks ran the op faster than 16×1 (the "-r4" copy, attn_tile.c; chosen
 * by the op's time, scripts/bench_tiles.sh, docs/speed.md).
 *   bench_blocks [--reps N] [--k K]
 * prints "isa block share" lines. */
#include <stdio.h>
#include <stdlib.h>

#include "tg_cli.h"
#include "tg_profile.h"
#include "tg_timing.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

#define BLOCK(NAME, TGT, VT, W, ZERO, LOAD, SET1, FMA, STORE, MR, NV)                                    \
    __attribute__((target(TGT), noinline)) static void NAME(int K, const float *A, const float *B, float *C) { \
        VT c[MR][NV];                                                                                \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[r][v] = ZERO();                   \
        for (int k = 0; k < K; k++) {                                                                \
            const float *b = B + k * 64, *a = A + k * 64;                                            \
            VT bv[NV];                                                                               \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] = LOAD(b + W * v);            \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                                  \
                const VT x = SET1(a[r]);                                                             \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[r][v] = FMA(x, bv[v], c[r][v]); \
            }                                                                                        \
        }                                                                                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) STORE(C + r * 64 + W * v, c[r][v]);  \
    }
#define B512(MR, NV) BLOCK(z##MR##x##NV, "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, \
                           _mm512_fmadd_ps, _mm512_storeu_ps, MR, NV)
#define B256(MR, NV) BLOCK(y##MR##x##NV, "avx2,fma", __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, \
                           _mm256_fmadd_ps, _mm256_storeu_ps, MR, NV)
B512(16, 1) B512(8, 1) B512(4, 1) B512(8, 2) B512(12, 2) B512(4, 3) B512(8, 3) B512(4, 4) B512(6, 4)
B256(12, 1) B256(8, 1) B256(4, 2) B256(6, 2) B256(3, 3) B256(4, 3)

typedef struct { const char *isa, *name; void (*fn)(int, const float *, const float *, float *); int mr, nv, w; } cand;
static const cand cands[] = {
    {"avx512", "16x1", z16x1, 16, 1, 16}, {"avx512", "8x1", z8x1, 8, 1, 16}, {"avx512", "4x1", z4x1, 4, 1, 16},
    {"avx512", "8x2", z8x2, 8, 2, 16},
    {"avx512", "12x2", z12x2, 12, 2, 16}, {"avx512", "4x3", z4x3, 4, 3, 16}, {"avx512", "8x3", z8x3, 8, 3, 16},
    {"avx512", "4x4", z4x4, 4, 4, 16},    {"avx512", "6x4", z6x4, 6, 4, 16}, {"avx2", "12x1", y12x1, 12, 1, 8},
    {"avx2", "8x1", y8x1, 8, 1, 8},       {"avx2", "4x2", y4x2, 4, 2, 8},    {"avx2", "6x2", y6x2, 6, 2, 8},
    {"avx2", "3x3", y3x3, 3, 3, 8},       {"avx2", "4x3", y4x3, 4, 3, 8},
};
#endif

int main(int argc, char **argv) {
    int reps = 5, K = 64;
    const tg_cli_opt opts[] = {{"reps", TG_CLI_INT, &reps, 1, 100, NULL, "rounds per block (the best is reported)"},
                               {"k", TG_CLI_INT, &K, 1, 64, NULL, "k steps a product"}};
    char err[256];
    const int rc = tg_cli_parse(opts, 2, argc, argv, err, sizeof err, NULL);
    if (rc == TG_CLI_HELP) {
        tg_cli_usage(stdout, "bench_blocks", "Time register blocks of a small product with a broadcast A.", opts, 2);
        return 0;
    }
    if (rc != TG_CLI_OK) {
        fprintf(stderr, "bench_blocks: %s\n", err);
        return 2;
    }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    float *A = calloc(64 * 64, sizeof(float)), *B = calloc(64 * 64, sizeof(float)), *C = calloc(16 * 64, sizeof(float));
    if (!A || !B || !C) return fprintf(stderr, "bench_blocks: out of memory\n"), 1;
    const double peak512 = __builtin_cpu_supports("avx512f") ? tg_timing_fma_gflops(512, 1, 5) : 0;
    const double peak256 = tg_timing_fma_gflops(256, 1, 5);
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        const cand *c = &cands[i];
        const int w512 = c->w == 16;
        if (w512 ? !(peak512 > 0) : !(peak256 > 0)) continue;   /* this CPU lacks the ISA */
        const long n = (long)(2e8 / (2.0 * c->mr * c->nv * c->w * K));
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = tg_profile_clock();
            for (long x = 0; x < n; x++) c->fn(K, A, B, C);
            const double t = tg_profile_clock() - t0;
            best = t < best ? t : best;
        }
        const double gf = 2.0 * c->mr * c->nv * c->w * K * n / best / 1e9;
        printf("%s %s %.0f%%\n", c->isa, c->name, 100 * gf / (w512 ? peak512 : peak256));
    }
    printf("# share of the FMA peak at the block's width (%.1f GFLOP/s at 512 bits, %.1f at 256), 1 thread, K %d, hot\n",
           peak512, peak256, K);
    free(A), free(B), free(C);
#else
    puts("# bench_blocks: x86-64 with GCC only (the tiles' copies are)");
#endif
    return 0;
}
