/* The benchmarks' clock, their summary statistic, and the sgemm rate their
 * figures are compared with. */
#ifndef TG_TIMING_H
#define TG_TIMING_H

double tg_timing_now_ms(void);                 /* CLOCK_MONOTONIC, in milliseconds */
double tg_timing_median(double *x, int n);     /* sorts x (n >= 1) */
/* CPU time of the whole process (all threads), in milliseconds: on a busy
 * machine it leaves out the time the process waited for a core. */
double tg_timing_cpu_ms(void);

/* GFLOP/s of one n×n×n OpenBLAS sgemm on `threads` OpenBLAS threads, the best
 * of `reps` after one untimed call: "the sgemm rate" of the speed targets.
 * Leaves OpenBLAS at one thread. */
double tg_timing_sgemm_gflops(int n, int threads, int reps);

#endif
