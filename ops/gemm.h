/* Matrix products for the ops (not an op: no TG_OPS line, like parallel.h).
 *
 * Every product is row-major C[M,N] = alpha·op(A)·op(B) + beta·C, op(X) = X
 * or Xᵀ by ta/tb, as cblas_sgemm with CblasRowMajor. The product plan
 * (tg_gemm_plan.h: measured on this machine, kept in a file, or estimated)
 * picks the library per product shape:
 *   - libxsmm (JIT kernels for the CPU it runs on) when it can and is faster:
 *     B not transposed (libxsmm 1.17 cannot JIT that layout), alpha = 1,
 *     beta 0 or 1. C is made in tiles of TG_GEMM_TILE × TG_GEMM_TILE, each
 *     over the whole K in chunks of at most TG_GEMM_KCHUNK (unchunked,
 *     long-K weight grads ran at a third of the speed); each chunk's sum is
 *     added to C, so the chunking is part of the rounding, and it follows
 *     from K alone;
 *   - OpenBLAS's cblas_sgemm for the rest (transposed B, other alphas, shapes
 *     where it is faster, and whenever libxsmm returns no kernel).
 * Kernels are dispatched when a call is prepared, on the calling thread: the
 * first time a shape is seen libxsmm compiles it (tens of µs, and mallocs),
 * later it is a look-up in libxsmm's registry. A training step has the same
 * shapes every time, so only the first step compiles or allocates.
 *
 * Each element of C is computed by one kernel sequence over the whole K
 * whatever the thread count (tiles and blocks follow from the shape alone),
 * so results do not depend on it. */
#ifndef TG_GEMM_H
#define TG_GEMM_H
#include <stdint.h>

/* Internal to the library: not exported from libtapegrad.so (its API is the
 * public headers), though named tg_ like the rest of tapegrad. */
#define TG_GEMM_API __attribute__((visibility("hidden")))

#define TG_GEMM_TILE 64          /* rows and columns of C a libxsmm kernel call makes */
#define TG_GEMM_KCHUNK 256       /* K a libxsmm kernel call sums at most */
#define TG_GEMM_BLAS_BLOCK 128   /* rows or columns of C an OpenBLAS call makes in tg_gemm_run_threads */

/* A libxsmm kernel: c (+)= a·b in column-major terms (libxsmm_smmfunction). */
typedef void (*tg_gemm_kernel)(const float *a, const float *b, float *c, ...);

/* One product prepared (not "plan": that is the product plan, tg_gemm_plan.h,
 * which decides the library; this holds the decision and the kernels). */
typedef struct tg_gemm_call {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int xsmm;                 /* 1: the kernels below; 0: cblas_sgemm */
    int avx;                  /* the kernels are AVX code: vzeroupper after them */
    int kc, nkc;              /* K chunk length and count (the last may be shorter) */
    int mt, nt;               /* tiles down and across C */
    tg_gemm_kernel fn[2][2][2][2];   /* [last tile row][last tile col][last K chunk][not the first chunk] */
} tg_gemm_call;

/* Picks the library and dispatches its kernels for one product shape (run
 * with tg_gemm_run). */
TG_GEMM_API void tg_gemm_call_init(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                       float beta, int ldc);

/* A call on the library given (1 libxsmm if it can, 0 OpenBLAS), not asking
 * the product plan: measurements and benchmarks. */
TG_GEMM_API void tg_gemm_call_fixed(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                        float beta, int ldc, int xsmm);

/* Whether the product plan puts this libxsmm-able shape on libxsmm (1) or
 * OpenBLAS (0): a look-up (an op deciding whether to make Bᵀ first). */
TG_GEMM_API int tg_gemm_picks_xsmm(int ta, int M, int N, int K, int lda, int ldb, int ldc, int blocks);

/* tg_gemm_call_init for a product run by tg_gemm_run_threads (blocks = 1:
 * OpenBLAS then runs in blocks of C, a decision of its own) or tg_gemm_run (0). */
TG_GEMM_API void tg_gemm_call_make(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                       float beta, int ldc, int blocks);

/* The product on the calling thread as tg_gemm_run_threads (blocks = 1) or
 * tg_gemm_run (0) runs it: the plan's measurements. */
TG_GEMM_API void tg_gemm_run_serial(const tg_gemm_call *p, int blocks, const float *A, const float *B, float *C);

/* Looks up a shape that tg_gemm will meet inside a parallel region, from
 * outside it: in measure mode it is then wanted by the program's
 * tg_gemm_plan_measure even in a pass that skips that region. */
TG_GEMM_API void tg_gemm_prepare(int ta, int M, int N, int K, int lda, int ldb, int ldc);

/* Makes p run on libxsmm whatever its width, if libxsmm can do it at all;
 * returns p->xsmm (benchmarks: setting p->xsmm = 0 makes it OpenBLAS). */
TG_GEMM_API int tg_gemm_call_xsmm(tg_gemm_call *p);

/* The whole product on the calling thread. */
TG_GEMM_API void tg_gemm_run(const tg_gemm_call *p, const float *A, const float *B, float *C);

/* Prepare and run on the calling thread (a plan look-up and a libxsmm look-up,
 * ~50 ns, per call); inside parallel regions too. */
TG_GEMM_API void tg_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
             float beta, float *C, int ldc);

/* The product split over tapegrad's threads (core/parallel.h) in blocks of C
 * when it is worth it; call it outside any parallel region. */
TG_GEMM_API void tg_gemm_run_threads(const tg_gemm_call *p, const float *A, const float *B, float *C);

/* Plan and run split over tapegrad's threads (core/parallel.h) in blocks of C
 * when the product is worth it; call it outside any parallel region. */
TG_GEMM_API void tg_gemm_threads(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc);

/* Y[cols, rows] = X[rows, cols]ᵀ, X's row stride ld: for products whose B
 * would be transposed (libxsmm 1.17 has no kernel for that), done once. */
TG_GEMM_API void tg_transpose(const float *X, int ld, int rows, int cols, float *Y);

/* "libxsmm" or "openblas": which library the call runs on (benchmarks). */
TG_GEMM_API const char *tg_gemm_backend(const tg_gemm_call *p);

/* The instruction set libxsmm compiles for ("cpx", "skx", "hsw", ...). */
TG_GEMM_API const char *tg_gemm_target(void);

#endif
