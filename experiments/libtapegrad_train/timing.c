#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "tg_timing.h"

#include <cblas.h>
#include <math.h>
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
