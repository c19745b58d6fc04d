/* What the benchmarks share: a clock, medians, and the sgemm rate a figure
 * is compared with. */
#ifndef TG_BENCHUTIL_H
#define TG_BENCHUTIL_H
#include <time.h>

double bench_clock_ms(clockid_t id);   /* CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, ... */
double bench_now_ms(void);             /* monotonic */
double bench_median(double *x, int n); /* sorts x */

/* GFLOP/s of one n×n×n OpenBLAS sgemm with `threads` OpenBLAS threads, the
 * best of `reps` (after one untimed call): what "the sgemm rate" of the
 * speed targets means. Leaves OpenBLAS at one thread. */
double bench_sgemm_gflops(int n, int threads, int reps);

#endif
