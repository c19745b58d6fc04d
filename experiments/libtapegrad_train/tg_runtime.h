/* A program's start: the BLAS kernel made to fit the CPU (tg_blas.h; this may
 * re-execute the process), then the threads. In the training kit, not the
 * library: a function that reads argv, prints and may restart the program is
 * the program's business (the library only decides, tg_blas_decide, and
 * checks, tg_blas_selfcheck; it never execs). Since 0.18; before, in
 * libtapegrad. */
#ifndef TG_RUNTIME_H
#define TG_RUNTIME_H

/* First thing in main: makes the kernel fit the CPU (tg_blas.h), restarting the
 * program (execv of /proc/self/exe, the same argv, same pid) when the
 * decision says so. Each restart, warning and failure is one line on stderr,
 * "prog: ...". Returns 0 to go on, or the status to exit with (the check
 * failed with every kernel). Test hook (TG_TEST_HOOKS builds of the library):
 * with TG_BLAS_TEST_AS_DETECTED=1 (and no marker), the core
 * OPENBLAS_CORETYPE loaded counts as OpenBLAS's own pick, not the user's:
 * OPENBLAS_CORETYPE=Prescott then plays a CPU OpenBLAS does not know, on any
 * x86-64 machine. */
int tg_blas_ensure(const char *prog, char **argv);

/* The start of every program, first thing in main(): tg_blas_ensure (the kernel
 * check, the self-check, at most one restart, the note when OPENBLAS_CORETYPE
 * keeps OpenBLAS below what the CPU can do), then the threads: `--threads N`
 * from argv if the program has that flag, else the variable TG_THREADS, else 1
 * (tg_set_threads). Returns 0 to go on, or the status to exit with (1: no
 * kernel passed the self-check; 2: TG_THREADS is not a number). */
int tg_runtime_init(const char *prog, int argc, char **argv);

/* tg_set_threads, which tg_runtime_init calls: tg_blas.h. */

#endif
