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

/* The core's limit: GFLOP/s of FP32 fused multiply-adds (2 flops each) on `threads` threads at
 * once, each running independent chains of `bits`-wide FMAs (512: AVX-512F, 256: AVX2+FMA) from
 * registers, nothing from memory; the best of `reps` timed rounds of about 20 ms after one
 * untimed. 0 when this CPU lacks that width. It is what no product or attention op can pass at
 * that width: the benchmarks' of_fma columns are shares of it, at the products' width
 * (tg_blas_info's xsmm_bits, tg_blas.h). */
double tg_timing_fma_gflops(int bits, int threads, int reps);

#endif
