/* Threading shared by the ops and the optimizers (in core since 0.20: it knows no op).
 *
 * tapegrad's threads are OpenMP's: omp_set_num_threads(n) (or OMP_NUM_THREADS)
 * sets how many the ops use. Work is split into independent items (batch ×
 * heads, row blocks) each done whole by one thread, so a result never depends
 * on which thread did it; sums across items are combined after the region in a
 * fixed order. OpenBLAS is called single-threaded inside a region: its own
 * pool would fight ours for the same cores. */
#ifndef TG_PARALLEL_H
#define TG_PARALLEL_H
#include <cblas.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this much work a parallel region costs more than it saves (a region
 * costs 2-4 µs here, spinning), and on a loaded machine a thread that waits for
 * a descheduled partner can lose a whole time slice: small calls run on the
 * calling thread. Work is counted in multiply-adds of a matrix product (~10 ps
 * each here, so the threshold is ~10 µs); an element of an element-wise pass
 * counts as what it measured (perf, `small` step, 1 thread): */
#define TG_PAR_MIN_WORK ((int64_t)1 << 20)
#define TG_WORK_COPY 32   /* ~0.3 ns: add, reshape, gelu, grad-norm and clip passes */
#define TG_WORK_NORM 48   /* ~0.45 ns: layernorm, AdamW */
#define TG_WORK_EXP 96    /* ~1 ns: cross-entropy (max, exp and sum a row) */

static inline int tg_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int tg_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* fn(arg, i, thread) for i in [0, n), on up to tg_threads() threads when the
 * whole job is worth it (work: its multiply-adds, or elements for a row op),
 * else on the calling thread. Not entering a region at all when serial
 * matters: libgomp mallocs a team for every one-thread region (a team of two
 * or more is cached), and after the first step nothing may malloc. */
typedef void (*tg_par_fn)(void *arg, int i, int thread);
static inline void tg_parallel_for(int n, int64_t work, tg_par_fn fn, void *arg) {
    int nt = tg_threads();   /* always the same team size: libgomp reuses it */
    if (nt <= 1 || n <= 1 || work < TG_PAR_MIN_WORK) {
        for (int i = 0; i < n; i++) fn(arg, i, 0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int i = 0; i < n; i++) fn(arg, i, omp_get_thread_num());
#endif
}

/* Hot element-wise loops get an AVX2 copy next to the baseline x86-64 one,
 * picked at load time (GCC function multi-versioning). Same operations in the
 * same order, no FMA contraction (ISO C mode): the same results either way.
 * Only on static functions: a global one gets an ifunc resolver symbol of
 * default visibility, which a shared libtapegrad exports (test_install). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#ifdef TG_NO_AVX512_CLONES   /* -DTG_AVX512_CLONES=OFF: an AVX-512 machine runs the AVX2 code (docs/speed.md) */
#define TG_VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TG_VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#else
#define TG_VEC_CLONES
#endif

/* Element-wise and row ops split into fixed-size parts (not one per thread),
 * so partial sums, combined in part order, do not depend on the thread count. */
#define TG_PART 8192   /* elements a part */
static inline int tg_parts(int64_t n, int64_t per_part) { return (int)((n + per_part - 1) / per_part); }

/* Around a parallel region that calls cblas: returns what to restore. */
static inline int tg_blas_serial_begin(void) {
    int n = openblas_get_num_threads();
    if (n > 1) openblas_set_num_threads(1);
    return n;
}
static inline void tg_blas_serial_end(int n) {
    if (n > 1) openblas_set_num_threads(n);
}

#endif
