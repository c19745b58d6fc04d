/* ops/gemm: the matrix products every op runs on, libxsmm or OpenBLAS by
 * shape. Against a double-precision loop, for every transpose combination,
 * alpha and beta; the same bits for one thread and two; beta = 0 never reads
 * C (backward writes grads nothing has zeroed); no heap allocation once a
 * shape has been planned. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gemm.h"
#include "malloc_count.h"
#include "parallel.h"
#include "tg_core.h"

typedef struct { int ta, tb, M, N, K, pad; } shape;

/* tiny; one tile; ragged tiles; K in chunks with a shorter last one; padded
 * leading dimensions; wider than libxsmm is used for */
static const shape shapes[] = {
    {0, 0, 1, 1, 1, 0},     {0, 0, 3, 5, 7, 2},      {0, 0, 64, 64, 64, 0},  {0, 0, 100, 77, 300, 3},
    {0, 0, 130, 65, 513, 0}, {0, 0, 40, 600, 20, 1},  {0, 0, 33, 17, 1000, 5},
};

/* C = alpha·op(A)·op(B) + beta·C in double, row-major with leading dims */
static void reference(const shape *s, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                      const float *C0, double *C, int ldc, double *bound) {
    for (int i = 0; i < s->M; i++)
        for (int j = 0; j < s->N; j++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < s->K; k++) {
                double a = s->ta ? A[(int64_t)k * lda + i] : A[(int64_t)i * lda + k];
                double b = s->tb ? B[(int64_t)j * ldb + k] : B[(int64_t)k * ldb + j];
                acc += a * b;
                mag += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : beta * (double)C0[(int64_t)i * ldc + j];
            C[(int64_t)i * ldc + j] = alpha * acc + c0;
            /* float sums of K terms: within K·2⁻²³ of Σ|a·b| (a loose, honest bound) */
            bound[(int64_t)i * ldc + j] = (s->K + 2) * 0x1p-23 * (fabs(alpha) * mag + fabs(c0)) + 1e-30;
        }
}

typedef struct { float *A, *B, *C; int lda, ldb, ldc; } operands;

static operands make(const shape *s, uint64_t seed) {
    operands o;
    int ar = s->ta ? s->K : s->M, ac = s->ta ? s->M : s->K, br = s->tb ? s->N : s->K, bc = s->tb ? s->K : s->N;
    o.lda = ac + s->pad;
    o.ldb = bc + s->pad;
    o.ldc = s->N + s->pad;
    o.A = malloc(sizeof(float) * (size_t)ar * o.lda);
    o.B = malloc(sizeof(float) * (size_t)br * o.ldb);
    o.C = malloc(sizeof(float) * (size_t)s->M * o.ldc);
    tg_rng r;
    tg_rng_seed(&r, seed, 3);
    tg_fill_uniform(&r, o.A, (int64_t)ar * o.lda, -1, 1);
    tg_fill_uniform(&r, o.B, (int64_t)br * o.ldb, -1, 1);
    tg_fill_uniform(&r, o.C, (int64_t)s->M * o.ldc, -1, 1);
    return o;
}

static void release(operands *o) {
    free(o->A);
    free(o->B);
    free(o->C);
}

static void test_matches_double(void **st) {
    (void)st;
    const float alphas[] = {1.0f, 0.5f}, betas[] = {0.0f, 1.0f, 0.25f};
    int n_xsmm = 0, n_blas = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++)
            for (int ai = 0; ai < 2; ai++)
                for (int bi = 0; bi < 3; bi++) {
                    shape s = shapes[si];
                    s.ta = t & 1;
                    s.tb = t >> 1;
                    operands o = make(&s, 10 * si + t);
                    size_t nc = (size_t)s.M * o.ldc;
                    float *C0 = malloc(sizeof(float) * nc);
                    double *want = malloc(sizeof(double) * nc), *bound = malloc(sizeof(double) * nc);
                    memcpy(C0, o.C, sizeof(float) * nc);
                    reference(&s, alphas[ai], o.A, o.lda, o.B, o.ldb, betas[bi], C0, want, o.ldc, bound);
                    tg_gemm_call p;
                    tg_gemm_call_init(&p, s.ta, s.tb, s.M, s.N, s.K, alphas[ai], o.lda, o.ldb, betas[bi], o.ldc);
                    n_xsmm += p.xsmm;
                    n_blas += !p.xsmm;
                    tg_gemm_run(&p, o.A, o.B, o.C);
                    for (int i = 0; i < s.M; i++)
                        for (int j = 0; j < o.ldc; j++) {
                            size_t x = (size_t)i * o.ldc + j;
                            if (j >= s.N) {   /* padding: untouched */
                                assert_memory_equal(&o.C[x], &C0[x], sizeof(float));
                                continue;
                            }
                            if (fabs(o.C[x] - want[x]) > bound[x])
                                fail_msg("%s ta%d tb%d %dx%dx%d alpha %g beta %g: C[%d,%d] = %.9g, want %.9g",
                                         tg_gemm_backend(&p), s.ta, s.tb, s.M, s.N, s.K, alphas[ai], betas[bi], i,
                                         j, o.C[x], want[x]);
                        }
                    free(C0);
                    free(want);
                    free(bound);
                    release(&o);
                }
    print_message("libxsmm target %s: %d products on libxsmm, %d on OpenBLAS\n", tg_gemm_target(), n_xsmm, n_blas);
    assert_true(n_blas > 0);
    /* libxsmm JITs for x86-64 CPUs: there it must have been tested */
#if defined(__x86_64__)
    assert_true(n_xsmm > 0);
#endif
}

/* The library choice and the kernels follow from the shape alone, and each
 * element of C is made whole by one thread: the same bits for 1 and 2 threads. */
static void test_threads_same_bits(void **st) {
    (void)st;
    const shape big[] = {{0, 0, 512, 64, 64, 0}, {1, 0, 64, 256, 512, 0}, {0, 1, 512, 64, 256, 0},
                         {0, 0, 300, 700, 130, 1}, {1, 0, 200, 100, 1000, 0}};
    for (size_t si = 0; si < sizeof big / sizeof big[0]; si++) {
        const shape *s = &big[si];
        operands o = make(s, 100 + si);
        size_t nc = (size_t)s->M * o.ldc;
        float *C1 = malloc(sizeof(float) * nc), *C2 = malloc(sizeof(float) * nc);
        tg_gemm_call p;
        tg_gemm_call_init(&p, s->ta, s->tb, s->M, s->N, s->K, 1.0f, o.lda, o.ldb, 1.0f, o.ldc);
        memcpy(C1, o.C, sizeof(float) * nc);
        memcpy(C2, o.C, sizeof(float) * nc);
        omp_set_num_threads(1);
        tg_gemm_run_threads(&p, o.A, o.B, C1);
        omp_set_num_threads(2);
        tg_gemm_run_threads(&p, o.A, o.B, C2);
        omp_set_num_threads(1);
        size_t diff = 0;
        for (size_t i = 0; i < nc; i++) diff += memcmp(&C1[i], &C2[i], sizeof(float)) != 0;
        if (diff)
            fail_msg("%s ta%d tb%d %dx%dx%d: %zu of %zu elements differ between 1 and 2 threads",
                     tg_gemm_backend(&p), s->ta, s->tb, s->M, s->N, s->K, diff, nc);
        free(C1);
        free(C2);
        release(&o);
    }
}

/* beta = 0 overwrites C without reading it: NaN there must not leak through. */
static void test_beta0_ignores_c(void **st) {
    (void)st;
    const shape ss[] = {{0, 0, 64, 64, 64, 0}, {1, 0, 64, 32, 600, 0}, {0, 1, 70, 30, 20, 0}};
    for (size_t si = 0; si < sizeof ss / sizeof ss[0]; si++)
        for (int threads = 1; threads <= 2; threads++) {
            const shape *s = &ss[si];
            operands o = make(s, 200 + si);
            size_t nc = (size_t)s->M * o.ldc;
            for (size_t i = 0; i < nc; i++) o.C[i] = NAN;
            tg_gemm_call p;
            tg_gemm_call_init(&p, s->ta, s->tb, s->M, s->N, s->K, 1.0f, o.lda, o.ldb, 0.0f, o.ldc);
            omp_set_num_threads(threads);
            tg_gemm_run_threads(&p, o.A, o.B, o.C);
            omp_set_num_threads(1);
            for (size_t i = 0; i < nc; i++)
                if (!isfinite(o.C[i])) fail_msg("%s, %d threads: C[%zu] is %g", tg_gemm_backend(&p), threads, i, o.C[i]);
            release(&o);
        }
}

/* The first plan of a shape may compile (and malloc); the next ones of the same
 * shape, and their runs, allocate nothing. */
static void test_no_heap_after_first(void **st) {
    (void)st;
    if (!malloc_count_available()) skip();
    const shape s = {1, 0, 64, 64, 700, 0};
    operands o = make(&s, 300);
    omp_set_num_threads(2);
    for (int i = 0; i < 3; i++) {
        if (i == 1) malloc_count_start();
        tg_gemm_threads(s.ta, s.tb, s.M, s.N, s.K, 1.0f, o.A, o.lda, o.B, o.ldb, 0.0f, o.C, o.ldc);
        tg_gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, o.A, o.lda, o.B, o.ldb, 1.0f, o.C, o.ldc);
    }
    size_t n = malloc_count_stop();
    omp_set_num_threads(1);
    assert_int_equal(n, 0);
    release(&o);
}

/* tg_transpose: every element in its place, for whole 8×8 blocks and edges
 * (rows, cols 1..27 cover each remainder), a row stride past the columns, and
 * nothing written past Y's rows·cols floats. */
static void test_transpose(void **st) {
    (void)st;
    enum { MAX = 27, PAD = 5 };
    float X[MAX * (MAX + PAD)], Y[MAX * MAX + 16];
    for (int i = 0; i < MAX * (MAX + PAD); i++) X[i] = (float)i + 0.5f;
    for (int rows = 1; rows <= MAX; rows++)
        for (int cols = 1; cols <= MAX; cols++) {
            const int ld = cols + (rows % 3) * PAD / 2;
            for (int i = 0; i < MAX * MAX + 16; i++) Y[i] = -1.0f;
            tg_transpose(X, ld, rows, cols, Y);
            for (int c = 0; c < cols; c++)
                for (int r = 0; r < rows; r++)
                    if (Y[c * rows + r] != X[r * ld + c])
                        fail_msg("tg_transpose %dx%d (ld %d): Y[%d][%d] = %g, want %g", rows, cols, ld, c, r,
                                 Y[c * rows + r], X[r * ld + c]);
            for (int i = rows * cols; i < MAX * MAX + 16; i++) assert_true(Y[i] == -1.0f);
        }
}

int main(void) {
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_double),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_beta0_ignores_c),
        cmocka_unit_test(test_no_heap_after_first),
        cmocka_unit_test(test_transpose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
