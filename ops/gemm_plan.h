/* The product plan's store, as ops/gemm.c uses it (internal: not installed,
 * hidden in a shared libtapegrad; the program's side is tg_gemm_plan.h).
 *
 * Layers: gemm_plan.c (the store: decisions, the file, the estimate) knows
 * nothing of how products run; gemm.c (the products) asks it for decisions and
 * hands it a timer for the shapes it may measure. Neither includes the other's
 * internals. */
#ifndef TG_GEMM_PLAN_INTERNAL_H
#define TG_GEMM_PLAN_INTERNAL_H

#define TG_PLAN_API __attribute__((visibility("hidden")))

/* A product shape as the plan keys it (the strides too: a head's view runs
 * slower than a whole matrix; blocks = 1: run by tg_gemm_run_threads). */
typedef struct { int ta, M, N, K, lda, ldb, ldc, blocks; } tg_plan_shape;

/* Times shape k on both libraries as a step runs it: 0 and the best times in
 * µs (*us_xsmm 0 and *can_xsmm 0 when libxsmm has no kernel for it), or -1
 * (out of memory: the estimate stands). */
typedef int (*tg_plan_timer)(const tg_plan_shape *k, float *us_xsmm, float *us_blas, int *can_xsmm);

/* The decision for a libxsmm-able shape (1: libxsmm, 0: OpenBLAS): a look-up,
 * never a file, a lock or a timing. A shape met for the first time is
 * estimated (in measure mode, marked wanted: the program's next
 * tg_gemm_plan_measure times it and may change its decision; after that it
 * never changes in the process). The hot path, a shape decided before, reads
 * without a lock. */
TG_PLAN_API int tg_gemm_plan_choose(const tg_plan_shape *k);

/* The planning phase's end (tg_gemm_plan_measure is this with the products'
 * timer): times every wanted shape, one at a time, and in measure=DIR mode
 * keeps them in the plan file (re-read and merged under its lock). Returns
 * how many shapes were timed. */
TG_PLAN_API int tg_gemm_plan_measure_with(tg_plan_timer timer);

#endif
