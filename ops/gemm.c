#include "gemm.h"

#include <cblas.h>
#include <libxsmm.h>
#include <stdlib.h>

#include "gemm_plan.h"     /* the plan's store: decisions by shape */
#include "parallel.h"
#include "tg_profile.h"    /* its clock */

#define TILE TG_GEMM_TILE

static int min_int(int a, int b) { return a < b ? a : b; }

/* libxsmm's AVX kernels return with the vector registers' upper halves in
 * use; code after them (glibc's exp in cross-entropy) then ran 3-4x slower
 * (measured: cross-entropy from 4% to 13% of a `small` step). vzeroupper
 * after a run of kernels costs nothing measurable. */
static void clean_upper(const tg_gemm_call *p) {
#if defined(__x86_64__) || defined(__i386__)
    if (p->avx) __asm__ volatile("vzeroupper");
#else
    (void)p;
#endif
}

/* Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: libxsmm's a is
 * our B as stored (never transposed here), its b our A (TRANS_B when ta). */
static tg_gemm_kernel dispatch(const tg_gemm_call *p, int rows, int cols, int k, float beta) {
    const float one = 1.0f;
    const libxsmm_blasint lda = p->ldb, ldb = p->lda, ldc = p->ldc;
    const int flags = (p->ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (beta == 0.0f ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    return libxsmm_smmdispatch(cols, rows, k, &lda, &ldb, &ldc, &one, &beta, &flags, &prefetch);
}

/* One kernel per kind of tile and K chunk the product has. */
static int dispatch_all(tg_gemm_call *p) {
    int last_rows = p->M - (p->mt - 1) * TILE, last_cols = p->N - (p->nt - 1) * TILE;
    int last_k = p->K - (p->nkc - 1) * p->kc;
    for (int r = p->mt > 1 ? 0 : 1; r < 2; r++)
        for (int c = p->nt > 1 ? 0 : 1; c < 2; c++)
            for (int kk = 0; kk < (p->nkc > 2 ? 3 : p->nkc); kk++) {
                /* chunk kinds: the first, a middle one, the last (the first is the last when nkc = 1) */
                int last = kk == (p->nkc > 2 ? 2 : p->nkc - 1), rest = kk > 0;
                tg_gemm_kernel f = dispatch(p, r ? last_rows : TILE, c ? last_cols : TILE,
                                            last ? last_k : p->kc, rest ? 1.0f : p->beta);
                if (!f) return 0;
                p->fn[r][c][last][rest] = f;
            }
    return 1;
}

/* Only B as stored, alpha 1 and beta 0 or 1 have a libxsmm kernel here. */
static int xsmm_able(int tb, float alpha, float beta) { return !tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f); }

void tg_gemm_call_fixed(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb, float beta,
                        int ldc, int xsmm) {
    *p = (tg_gemm_call){ .ta = !!ta, .tb = !!tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                         .alpha = alpha, .beta = beta };
    if (xsmm) tg_gemm_call_xsmm(p);
}

/* The plan's decision for a libxsmm-able shape (ops/gemm_plan.h): a look-up,
 * never a measurement (the program's tg_gemm_plan_measure times shapes). */
static int decide(int ta, int M, int N, int K, int lda, int ldb, int ldc, int blocks) {
    const tg_plan_shape k = {!!ta, M, N, K, lda, ldb, ldc, !!blocks};
    return tg_gemm_plan_choose(&k);
}

static void plan(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb, float beta,
                 int ldc, int blocks) {
    int x = xsmm_able(tb, alpha, beta) && decide(ta, M, N, K, lda, ldb, ldc, blocks);
    tg_gemm_call_fixed(p, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, x);
}

void tg_gemm_call_init(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                       float beta, int ldc) {
    plan(p, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, 0);
}

void tg_gemm_call_make(tg_gemm_call *p, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                       float beta, int ldc, int blocks) {
    plan(p, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, !!blocks);
}

void tg_gemm_prepare(int ta, int M, int N, int K, int lda, int ldb, int ldc) {
    (void)decide(ta, M, N, K, lda, ldb, ldc, 0);
}

int tg_gemm_picks_xsmm(int ta, int M, int N, int K, int lda, int ldb, int ldc, int blocks) {
    return decide(ta, M, N, K, lda, ldb, ldc, blocks);
}

int tg_gemm_call_xsmm(tg_gemm_call *p) {
    if (!xsmm_able(p->tb, p->alpha, p->beta)) return 0;
    p->nkc = (p->K + TG_GEMM_KCHUNK - 1) / TG_GEMM_KCHUNK;
    p->kc = (p->K + p->nkc - 1) / p->nkc;   /* equal chunks but the last */
    p->nkc = (p->K + p->kc - 1) / p->kc;
    p->mt = (p->M + TILE - 1) / TILE;
    p->nt = (p->N + TILE - 1) / TILE;
    p->xsmm = dispatch_all(p);
    p->avx = libxsmm_get_target_archid() >= LIBXSMM_X86_AVX;
    return p->xsmm;
}

/* Tile t (row-major order over C's tiles) over the whole K. */
static void run_tile(const tg_gemm_call *p, const float *A, const float *B, float *C, int t) {
    int i = t / p->nt, j = t % p->nt, r = i == p->mt - 1, c = j == p->nt - 1;
    int64_t r0 = (int64_t)i * TILE, c0 = (int64_t)j * TILE;
    float *Ct = C + r0 * p->ldc + c0;
    for (int kk = 0; kk < p->nkc; kk++) {
        int64_t k0 = (int64_t)kk * p->kc;
        const float *At = p->ta ? A + k0 * p->lda + r0 : A + r0 * p->lda + k0;
        p->fn[r][c][kk == p->nkc - 1][kk > 0](B + k0 * p->ldb + c0, At, Ct);
    }
}

static void blas(const tg_gemm_call *p, int M, int N, const float *A, const float *B, float *C) {
    cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, M, N, p->K,
                p->alpha, A, p->lda, B, p->ldb, p->beta, C, p->ldc);
}

void tg_gemm_run(const tg_gemm_call *p, const float *A, const float *B, float *C) {
    if (!p->xsmm) {
        blas(p, p->M, p->N, A, B, C);
        return;
    }
    for (int t = 0; t < p->mt * p->nt; t++) run_tile(p, A, B, C, t);
    clean_upper(p);
}

void tg_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
             float beta, float *C, int ldc) {
    tg_gemm_call p;
    plan(&p, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, 0);
    tg_gemm_run(&p, A, B, C);
}

/* Split over threads. libxsmm: one item a tile. OpenBLAS: blocks of
 * TG_GEMM_BLAS_BLOCK of C's rows or columns (whichever is longer), each a
 * single-threaded call: OpenBLAS's own threaded sgemm mallocs a job array on
 * every call, and a step must not allocate. The blocks do not depend on the
 * thread count: OpenBLAS's result for an element can depend on the shape of
 * the call (measured: its Haswell kernels, 512×64×256 with B transposed, as
 * one call or as two of 256 rows), so the split must not. */
typedef struct {
    const tg_gemm_call *p;
    const float *A, *B;
    float *C;
    int by_rows, chunk;
} gemm_job;

static void tile_item(void *arg, int t, int thread) {
    (void)thread;
    const gemm_job *g = arg;
    run_tile(g->p, g->A, g->B, g->C, t);
    clean_upper(g->p);
}

static void blas_item(void *arg, int i, int thread) {
    (void)thread;
    const gemm_job *g = arg;
    const tg_gemm_call *p = g->p;
    int len = g->by_rows ? p->M : p->N, lo = i * g->chunk, n = min_int(len - lo, g->chunk);
    if (n <= 0) return;
    if (g->by_rows)   /* rows lo.. of op(A) and C */
        blas(p, n, p->N, g->A + (p->ta ? lo : (int64_t)lo * p->lda), g->B, g->C + (int64_t)lo * p->ldc);
    else              /* columns lo.. of op(B) and C */
        blas(p, p->M, n, g->A, g->B + (p->tb ? (int64_t)lo * p->ldb : lo), g->C + lo);
}

void tg_gemm_run_serial(const tg_gemm_call *p, int blocks, const float *A, const float *B, float *C) {
    if (p->xsmm || !blocks) {
        tg_gemm_run(p, A, B, C);
        return;
    }
    gemm_job g = { p, A, B, C, p->M >= p->N, TG_GEMM_BLAS_BLOCK };
    int len = g.by_rows ? p->M : p->N;
    for (int i = 0; i < (len + g.chunk - 1) / g.chunk; i++) blas_item(&g, i, 0);
}

void tg_gemm_run_threads(const tg_gemm_call *p, const float *A, const float *B, float *C) {
    gemm_job g = { p, A, B, C, p->M >= p->N, 0 };
    int64_t work = (int64_t)p->M * p->N * p->K;
    if (p->xsmm) {
        tg_parallel_for(p->mt * p->nt, work, tile_item, &g);
        return;
    }
    int len = g.by_rows ? p->M : p->N;
    g.chunk = TG_GEMM_BLAS_BLOCK;
    int blas_threads = tg_blas_serial_begin();
    tg_parallel_for((len + g.chunk - 1) / g.chunk, work, blas_item, &g);
    tg_blas_serial_end(blas_threads);
}

void tg_gemm_threads(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    tg_gemm_call p;
    tg_gemm_call_make(&p, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, 1);
    tg_gemm_run_threads(&p, A, B, C);
}

/* 8×8 blocks as 8 vectors of 8 (GCC's vector extension), transposed in three
 * stages, stage k swapping bit k of the row (which vector) with bit k of the
 * column (which lane), each a two-source shuffle per vector (AVX-512: one
 * vpermt2ps), in registers. Element by element,
 * the strided reads kept the loop scalar: 6% of an attention op's time at
 * T 32, d 16 (perf, AMD Zen 4, libxsmm cpx, OpenBLAS Cooperlake). Edges element by element. */
typedef float vf8 __attribute__((vector_size(32), aligned(4)));

/* Stage k for vectors a (row bit k clear) and b (set): a takes the lanes with
 * column bit k clear from both, b the others (a's new lane i is a[i & ~k] or
 * b[i & ~k], b's a[i | k] or b[i | k]). __builtin_shufflevector: GCC 12 and clang. */
#define SWAP_BIT(a, b, k)                                                    \
    do {                                                                     \
        vf8 a_ = a;                                                          \
        a = __builtin_shufflevector(a_, b, SHUF_LO_##k);                     \
        b = __builtin_shufflevector(a_, b, SHUF_HI_##k);                     \
    } while (0)
#define SHUF_LO_1 0, 8, 2, 10, 4, 12, 6, 14
#define SHUF_HI_1 1, 9, 3, 11, 5, 13, 7, 15
#define SHUF_LO_2 0, 1, 8, 9, 4, 5, 12, 13
#define SHUF_HI_2 2, 3, 10, 11, 6, 7, 14, 15
#define SHUF_LO_4 0, 1, 2, 3, 8, 9, 10, 11
#define SHUF_HI_4 4, 5, 6, 7, 12, 13, 14, 15
#define SWAP_BIT4(k, a, b, c, d, e, f, g, h) \
    SWAP_BIT(a, b, k);                       \
    SWAP_BIT(c, d, k);                       \
    SWAP_BIT(e, f, k);                       \
    SWAP_BIT(g, h, k)

/* Static: a target-cloned function gets an ifunc resolver symbol of default
 * visibility, which a shared libtapegrad would export (tests/exported_symbols). */
TG_VEC_CLONES static void transpose(const float *X, int ld, int rows, int cols, float *Y) {
    const int r8 = rows & ~7, c8 = cols & ~7;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8) {
            const float *x = X + (int64_t)r0 * ld + c0;
            vf8 v0 = *(const vf8 *)x, v1 = *(const vf8 *)(x + ld), v2 = *(const vf8 *)(x + 2 * ld),
                v3 = *(const vf8 *)(x + 3 * ld), v4 = *(const vf8 *)(x + 4 * ld), v5 = *(const vf8 *)(x + 5 * ld),
                v6 = *(const vf8 *)(x + 6 * ld), v7 = *(const vf8 *)(x + 7 * ld);
            SWAP_BIT4(1, v0, v1, v2, v3, v4, v5, v6, v7);
            SWAP_BIT4(2, v0, v2, v1, v3, v4, v6, v5, v7);
            SWAP_BIT4(4, v0, v4, v1, v5, v2, v6, v3, v7);
            float *y = Y + (int64_t)c0 * rows + r0;
            *(vf8 *)y = v0, *(vf8 *)(y + rows) = v1, *(vf8 *)(y + 2 * rows) = v2, *(vf8 *)(y + 3 * rows) = v3;
            *(vf8 *)(y + 4 * rows) = v4, *(vf8 *)(y + 5 * rows) = v5, *(vf8 *)(y + 6 * rows) = v6;
            *(vf8 *)(y + 7 * rows) = v7;
        }
    for (int r = 0; r < rows; r++)   /* the edges: columns past c8 of every row, rows past r8 */
        for (int c = r < r8 ? c8 : 0; c < cols; c++) Y[(int64_t)c * rows + r] = X[(int64_t)r * ld + c];
}

void tg_transpose(const float *X, int ld, int rows, int cols, float *Y) { transpose(X, ld, rows, cols, Y); }

const char *tg_gemm_backend(const tg_gemm_call *p) { return p->xsmm ? "libxsmm" : "openblas"; }

const char *tg_gemm_target(void) { return libxsmm_get_target_arch(); }

/* ---- the plan's timer ------------------------------------------------------------ */
/* Both libraries on this shape with its strides, on the calling thread, as
 * a step runs it: a head's product (run whole) on operands cycled through
 * copies that together outgrow the L2 cache, as the attention ops stream
 * through heads (one hot copy flattered libxsmm on a head's 64×128×64 by
 * 10%: AVX2 code on an AMD Zen 5, OpenBLAS Haswell, libxsmm hsw); a linear
 * layer's (run in blocks) on one hot copy, as tg_matmul runs on what was
 * just made (cycled, a 128×64×2048 weight grad came out 13% the other way
 * there); rounds alternating the two libraries, each the best of
 * its rounds (the least disturbed). 0 and the times, or -1 (out of memory). */
static int measure(const tg_plan_shape *k, float *us_x, float *us_b, int *xsmm) {
    const int M = k->M, N = k->N, K = k->K;
    size_t na = (size_t)(k->ta ? K : M) * k->lda, nb = (size_t)K * k->ldb, nc = (size_t)M * k->ldc;
    size_t one = (na + nb + nc) * sizeof(float);
    int copies = (int)((size_t)(8 << 20) / one);
    copies = copies < 1 ? 1 : copies > 32 ? 32 : copies;
    if (k->blocks) copies = 1;   /* a linear layer's product: its operands were just made, and are hot */
    float *mem = malloc(one * (size_t)copies);
    if (!mem) return -1;
    for (size_t i = 0; i < (na + nb + nc) * (size_t)copies; i++) mem[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
    tg_gemm_call px, pb;
    tg_gemm_call_fixed(&pb, k->ta, 0, M, N, K, 1.0f, k->lda, k->ldb, 0.0f, k->ldc, 0);
    tg_gemm_call_fixed(&px, k->ta, 0, M, N, K, 1.0f, k->lda, k->ldb, 0.0f, k->ldc, 1);
    *xsmm = px.xsmm;
    double flops = 2.0 * M * N * K;
    int reps = (int)(4e6 / (flops > 1 ? flops : 1)) + 1;   /* a round: ~4 MFLOP, 0.05-0.3 ms */
    if (reps < copies) reps = copies;
    if (reps > 2000) reps = 2000;
    double best[2] = {1e30, 1e30}, spent = 0;
    /* round -1 warms pages, caches and kernels; then at least 9 rounds and 20 ms */
    for (int round = -1; round < 9 || (spent < 20e3 && round < 40); round++)
        for (int w = 0; w < 1 + px.xsmm; w++) {
            const tg_gemm_call *p = w ? &px : &pb;
            double t0 = 1e6 * tg_profile_clock();
            for (int r = 0; r < reps; r++) {
                float *A = mem + (size_t)(r % copies) * (na + nb + nc);
                tg_gemm_run_serial(p, k->blocks, A, A + na, A + na + nb);
            }
            double t = (1e6 * tg_profile_clock() - t0) / reps;
            if (round >= 0 && t < best[w]) best[w] = t;
            if (round >= 0) spent += t * reps;
        }
    *us_b = (float)best[0];
    *us_x = px.xsmm ? (float)best[1] : 0.0f;
    free(mem);
    return 0;
}

int tg_gemm_plan_measure(void) { return tg_gemm_plan_measure_with(measure); }
