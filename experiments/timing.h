/* The benchmarks' clock and their summary statistic. */
#ifndef TG_TIMING_H
#define TG_TIMING_H

double timing_now_ms(void);                 /* CLOCK_MONOTONIC, in milliseconds */
double timing_median(double *x, int n);     /* sorts x (n >= 1) */

#endif
