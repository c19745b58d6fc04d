#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "tg_timing.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#include "tg_core.h"
#include "tg_profile.h"

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

double tg_timing_now_ms(void) { return 1e3 * tg_profile_clock(); }   /* the one monotonic clock, core's */

double tg_timing_cpu_ms(void) { return clock_ms(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tg_timing_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double tg_timing_sgemm_gflops(int n, int threads, int reps) {
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)), *c = malloc(nn * sizeof(float));
    double best = INFINITY;
    if (a && b && c) {
        tg_fill_uniform(&(tg_rng){5, 7}, a, (int64_t)nn, -1, 1);
        tg_fill_uniform(&(tg_rng){6, 7}, b, (int64_t)nn, -1, 1);
        openblas_set_num_threads(threads);
        for (int r = 0; r <= reps; r++) {
            double t0 = tg_timing_now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double t = tg_timing_now_ms() - t0;
            if (r > 0 && t < best) best = t;
        }
        openblas_set_num_threads(1);
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * (double)n / (best / 1e3) / 1e9;
}

/* ---- the FMA peak --------------------------------------------------------------------------- */
/* Independent chains: an FMA's latency (4 cycles) times the FMA pipes (2) is 8 in flight per
 * core; 16 (AVX-512, 32 registers) and 12 (AVX2: 16 registers, two of them the operands) cover a
 * longer latency too. The operands keep the accumulators finite (x·1 + 0 stays x). */
static volatile float fma_one = 1.0f, fma_zero = 0.0f;   /* unknown to the compiler: no folding of x·1 + 0 */

/* Written out, not as loops over arrays: the accumulators must stay in registers. */
#define FMA4(f, x0, x1, x2, x3) x0 = f(x0, a, b), x1 = f(x1, a, b), x2 = f(x2, a, b), x3 = f(x3, a, b)

__attribute__((target("avx512f"))) static float chains512(long n) {
    const __m512 a = _mm512_set1_ps(fma_one), b = _mm512_set1_ps(fma_zero);
#define V _mm512_set1_ps(fma_one)   /* each a volatile read: chains the compiler cannot merge */
    __m512 x0 = V, x1 = V, x2 = V, x3 = V, x4 = V, x5 = V, x6 = V, x7 = V;
    __m512 x8 = V, x9 = V, x10 = V, x11 = V, x12 = V, x13 = V, x14 = V, x15 = V;
#undef V
    for (long i = 0; i < n; i++) {
        FMA4(_mm512_fmadd_ps, x0, x1, x2, x3);
        FMA4(_mm512_fmadd_ps, x4, x5, x6, x7);
        FMA4(_mm512_fmadd_ps, x8, x9, x10, x11);
        FMA4(_mm512_fmadd_ps, x12, x13, x14, x15);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                             _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)),
                                       _mm512_add_ps(_mm512_add_ps(x12, x13), _mm512_add_ps(x14, x15))));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float chains256(long n) {   /* 12 chains + a, b: 16 registers */
    const __m256 a = _mm256_set1_ps(fma_one), b = _mm256_set1_ps(fma_zero);
#define V _mm256_set1_ps(fma_one)
    __m256 x0 = V, x1 = V, x2 = V, x3 = V, x4 = V, x5 = V, x6 = V, x7 = V, x8 = V, x9 = V, x10 = V, x11 = V;
#undef V
    for (long i = 0; i < n; i++) {
        FMA4(_mm256_fmadd_ps, x0, x1, x2, x3);
        FMA4(_mm256_fmadd_ps, x4, x5, x6, x7);
        FMA4(_mm256_fmadd_ps, x8, x9, x10, x11);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                             _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

double tg_timing_fma_gflops(int bits, int threads, int reps) {
    __builtin_cpu_init();
    int ok = bits == 512 ? __builtin_cpu_supports("avx512f") : bits == 256 && __builtin_cpu_supports("avx2") &&
                                                                       __builtin_cpu_supports("fma");
    if (!ok || threads < 1) return 0;
    const double flops_per_iter = 2.0 * (bits == 512 ? 16 * 16 : 12 * 8);   /* chains × lanes × 2 */
    long n = 1 << 16;
    volatile float sink = 0;
    for (;;) {   /* about 20 ms a round on one thread */
        double t0 = tg_timing_now_ms();
        sink += bits == 512 ? chains512(n) : chains256(n);
        if (tg_timing_now_ms() - t0 > 5 || n > (1L << 40)) break;
        n *= 2;
    }
    n *= 4;
    double best = INFINITY;
    for (int r = 0; r <= reps; r++) {
        double t0 = tg_timing_now_ms();
#pragma omp parallel num_threads(threads)
        {
            float x = bits == 512 ? chains512(n) : chains256(n);
#pragma omp atomic
            sink += x;
        }
        double t = tg_timing_now_ms() - t0;
        if (r > 0 && t < best) best = t;
    }
    (void)sink;
    return flops_per_iter * (double)n * threads / (best / 1e3) / 1e9;
}
