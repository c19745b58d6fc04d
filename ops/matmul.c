#include "matmul.h"

#include "gemm.h"

/* prec: the context's precision at the forward; A, B: the operands as the products
 * read them (a and b rounded to it, or their own data) */
typedef struct { int ta, tb; int nbatch, M, N, K; int b_shared; int prec; const float *A, *B; } matmul_rec;

/* Batch i of a row-major GEMM: C_i (+)= op(A_i) op(B_i). Shared b (2-D) is the
 * same matrix for every i; when a is not transposed its batches fold into one
 * tall GEMM, which is the common linear-layer case. */
static void shapes(const matmul_rec *r, int *lda, int *ldb) {
    *lda = r->ta ? r->M : r->K;
    *ldb = r->tb ? r->K : r->N;
}

/* dA = dC·Bᵀ with B [K,N] as stored: libxsmm has no kernel for a transposed
 * B, OpenBLAS has. Measured (bench_gemm, one thread, the transposition
 * included): with Bᵀ made first (K·N floats) the product on libxsmm is 10-25%
 * faster at 512 rows (small), 10-30% at 2048-4096 (seed, large), about equal
 * at 4096×1024×256. Below a few hundred rows the copy would weigh more. And
 * only where the product plan puts dC·(Bᵀ as stored) on libxsmm: where it
 * picks OpenBLAS (most shapes with AVX2), OpenBLAS takes B transposed as it
 * is, and the copy would be all loss. */
enum { TRANSPOSE_MIN_ROWS = 256 };

static void matmul_backward(tg_ctx *ctx, const tg_node *n) {
    const matmul_rec *r = n->saved;
    tg_tensor *a = n->in[0], *b = n->in[1], *c = n->out;
    int lda, ldb, M = r->M, N = r->N, K = r->K;
    shapes(r, &lda, &ldb);
    int64_t sa = (int64_t)M * K, sb = r->b_shared ? 0 : (int64_t)K * N, sc = (int64_t)M * N;
    const float *dCr = tg_operand(ctx, r->prec, c->grad, c->numel);
    /* a grad nothing wrote yet is written (beta 0) rather than zeroed and added to */
    float beta_a = a->grad && tg_grad_first(a) ? 0.0f : 1.0f;
    float beta_b = b->grad && tg_grad_first(b) ? 0.0f : 1.0f;
    float *bt = a->grad && !r->ta && !r->tb && M >= TRANSPOSE_MIN_ROWS &&
                        tg_gemm_picks_xsmm(0, M, K, N, N, K, lda, 1)
                    ? tg_arena_alloc(ctx, (size_t)K * N * sizeof(float)) : NULL;
    for (int i = 0; i < r->nbatch; i++) {
        const float *A = r->A + i * sa, *B = r->B + i * sb, *dC = dCr + i * sc;
        if (a->grad) {
            float *dA = a->grad + i * sa;
            if (bt) {     /* dA[M,K] += dC[M,N] · Bᵀ, Bᵀ made first */
                tg_transpose(B, ldb, K, N, bt);
                tg_gemm_threads(0, 0, M, K, N, 1.0f, dC, N, bt, K, beta_a, dA, lda);
            } else if (!r->ta) {   /* dA[M,K] += dC[M,N] · op(B)ᵀ */
                tg_gemm_threads(0, !r->tb, M, K, N, 1.0f, dC, N, B, ldb, beta_a, dA, lda);
            } else {      /* dA[K,M] += op(B) · dCᵀ */
                tg_gemm_threads(r->tb, 1, K, M, N, 1.0f, B, ldb, dC, N, beta_a, dA, lda);
            }
        }
        if (b->grad) {
            float *dB = b->grad + i * sb;
            if (!r->tb)   /* dB[K,N] += op(A)ᵀ · dC */
                tg_gemm_threads(!r->ta, 0, K, N, M, 1.0f, A, lda, dC, N, beta_b, dB, ldb);
            else          /* dB[N,K] += dCᵀ · op(A) */
                tg_gemm_threads(1, r->ta, N, K, M, 1.0f, dC, N, A, lda, beta_b, dB, ldb);
            if (r->b_shared) beta_b = 1.0f;   /* one dB summed over the batch */
        }
    }
}

tg_tensor *tg_matmul(tg_ctx *ctx, tg_tensor *a, tg_tensor *b, int ta, int tb) {
    if (a->ndim < 2 || b->ndim < 2)
        tg_fail(ctx, "tg_matmul: both inputs need at least 2 dimensions: %s x %s", TG_SHAPE(a), TG_SHAPE(b));
    int ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    matmul_rec r = { .ta = !!ta, .tb = !!tb };
    r.M = ta ? ac : ar;
    r.K = ta ? ar : ac;
    int kb = tb ? bc : br;
    r.N = tb ? br : bc;
    if (r.K != kb)
        tg_fail(ctx, "tg_matmul: inner dimensions differ: %s%s x %s%s", TG_SHAPE(a), ta ? "ᵀ" : "",
                TG_SHAPE(b), tb ? "ᵀ" : "");
    r.b_shared = b->ndim == 2;
    if (!r.b_shared) {
        int same = b->ndim == a->ndim;
        for (int i = 0; same && i < a->ndim - 2; i++) same = a->shape[i] == b->shape[i];
        if (!same)
            tg_fail(ctx, "tg_matmul: batch dimensions differ: %s x %s (b must be 2-D or share a's batch dims)",
                    TG_SHAPE(a), TG_SHAPE(b));
    }
    r.nbatch = (int)(a->numel / ((int64_t)ar * ac));
    if (r.b_shared && !r.ta) {   /* fold the batch into the rows */
        r.M *= r.nbatch;
        r.nbatch = 1;
    }
    int shape[TG_MAX_DIMS];
    for (int i = 0; i < a->ndim - 2; i++) shape[i] = a->shape[i];
    shape[a->ndim - 2] = ta ? ac : ar;
    shape[a->ndim - 1] = r.N;
    tg_tensor *c = tg_new(ctx, a->ndim, shape);

    int lda, ldb;
    shapes(&r, &lda, &ldb);
    int64_t sa = (int64_t)r.M * r.K, sb = r.b_shared ? 0 : (int64_t)r.K * r.N, sc = (int64_t)r.M * r.N;
    r.prec = ctx->precision;
    r.A = tg_operand(ctx, r.prec, a->data, a->numel);
    r.B = tg_operand(ctx, r.prec, b->data, b->numel);
    for (int i = 0; i < r.nbatch; i++)
        tg_gemm_threads(r.ta, r.tb, r.M, r.N, r.K, 1.0f, r.A + i * sa, lda, r.B + i * sb, ldb, 0.0f,
             c->data + i * sc, r.N);

    tg_node *n = tg_record(ctx, "tg_matmul", matmul_backward, c, 2, (tg_tensor *[]){a, b}, sizeof r);
    if (n) {
        *(matmul_rec *)n->saved = r;
        n->own_grads = 1;
        double flop = 2.0 * r.M * r.N * r.K * r.nbatch;
        n->flops[0] = flop;
        n->flops[1] = flop * (a->requires_grad + b->requires_grad);
    }
    return c;
}
