/* A program's start: the BLAS kernel made to fit the CPU (tg_blas.h; this may
 * re-execute the process), then the threads. Not the BLAS itself, so not in
 * tg_blas.h: a function that reads argv and may restart the program is the
 * program's business, and says so by its header. */
#ifndef TG_RUNTIME_H
#define TG_RUNTIME_H

/* The start of every program, first thing in main(): tg_blas_ensure (the kernel
 * check, the self-check, at most one restart, the note when OPENBLAS_CORETYPE
 * keeps OpenBLAS below what the CPU can do), then the threads: `--threads N`
 * from argv if the program has that flag, else the variable TG_THREADS, else 1
 * (tg_set_threads). Returns 0 to go on, or the status to exit with (1: no
 * kernel passed the self-check; 2: TG_THREADS is not a number). */
int tg_runtime_init(const char *prog, int argc, char **argv);

/* Threads for the library's ops: n OpenMP threads, OpenBLAS single-threaded (the
 * ops split batch, heads and rows themselves; OpenBLAS's own threads would
 * allocate per call). Every result is the same for any n (docs/speed.md#threads).
 * tg_runtime_init calls it; call it again to change the count. */
void tg_set_threads(int n);

#endif
