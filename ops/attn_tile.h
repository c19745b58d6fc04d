/* Internal to the attention ops (not installed, not exported): register-blocked
 * tiles, one copy per ISA (AVX-512, AVX2, plain C), picked at run time.
 *
 * - gemm: C = α·A B (add: C += α·A B; α multiplies the finished sum) for the
 *   small products of a head, A read by strides (row-major A: ars = lda,
 *   acs = 1; Aᵀ of a row-major matrix: ars = 1, acs = lda), B and C
 *   row-major. MR rows of C × NV vectors of columns stay in registers while k
 *   runs; each k broadcasts one float of A per row and loads NV vectors of B:
 *   no packing, no call per block. Every C entry is one chain of FMAs in k
 *   order, so the three copies agree to the bit.
 * - softmax: a key-major tile S [nk][16] (row j: key k0 + j, lane a: query a;
 *   rows lds apart) becomes the weights of its 16 query rows in place. The
 *   row work (mask, max, exp, sum, 1/sum) runs across the 16 queries at once,
 *   a vector per key, with no reduction inside a vector.
 * - dsoftmax: the softmax's backward on such a tile, across the lanes too.
 * - transpose: by TT_W × TT_W blocks in registers.
 *
 * exp is tg_exp_neg_fma (vmath.h) in vector form, the same operations in the
 * same order: the same float for every input, so the same bound (within 0.94
 * ulp on [−87, 0], 0 below, NaN for NaN; tests/test_attn_tile.c checks every
 * copy against tg_exp_neg_fma, and it against exp). The softmax's sum and
 * dsoftmax's D run by blocks of 8 keys, in float within a block and in double
 * across blocks, in the same order in every copy. */
#ifndef TG_OPS_ATTN_TILE_H
#define TG_OPS_ATTN_TILE_H
#include <stdint.h>

#define TG_TILE_Q 16   /* query rows of a key-major tile: one AVX-512 vector */

typedef struct {
    const char *name;   /* "avx512", "avx2", "c" */
    void (*gemm)(int M, int N, int K, float alpha, const float *A, int64_t ars, int64_t acs, const float *B,
                 int64_t ldb, float *C, int64_t ldc, int add);
    /* S: the tile, row j (stride lds) key k0 + j, lane a query a. raw: x = s·S on
     * each lane's keys [lo, hi) (absolute), −inf elsewhere; else S holds logits,
     * −inf where invisible. sink: −inf for none. top[a]: lane a's largest key
     * logit (−inf: none; NaN: only NaN and −inf); psink[a] (or NULL): the sink's weight. */
    void (*softmax)(float *S, int64_t lds, int nk, int k0, const int *lo, const int *hi, int raw, float s, float sink,
                    float *top, float *psink);
    /* G holds dP, P the weights (key-major, stride ld): D[a] = Σ_j P dP, G = P ⊙ (dP − D) */
    void (*dsoftmax)(float *G, const float *P, int64_t ld, int nk, float *D);
    /* Y[c·ldy + r] = X[r·ldx + c], r < rows, c < cols */
    void (*transpose)(const float *X, int64_t ldx, int rows, int cols, float *Y, int64_t ldy);
} tg_tile_ops;

/* The copy for isa 0 (the best this CPU runs: AVX-512 unless built with
 * -DTG_AVX512_CLONES=OFF, else AVX2, else C), 1 AVX-512, 2 AVX2, 3 C, 4 and 5
 * AVX-512 and AVX2 with the products a tile wide (16 floats) in blocks of 4
 * rows ("avx512-r4", "avx2-r4": isa 0's on AMD family 19h, attn_tile.c; the
 * same results to the bit); NULL when this CPU (or build) cannot run it. */
__attribute__((visibility("hidden"))) const tg_tile_ops *tg_tile_ops_for(int isa);

#endif
