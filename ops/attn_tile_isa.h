/* One ISA's copy of the attention tiles (attn_tile.h), included by
 * attn_tile.c once per ISA with its vector macros defined: TT(name) (the
 * copy's names), TT_TARGET, TT_W (floats a vector), TT_NVMAX (vectors of C
 * a block at most) and TT_MR(nv) (rows of C a block), V (the vector type) and
 * the V_* / M_* operations. No include guard: that is the point. */

#define TT_U (TG_TILE_Q / TT_W)   /* vectors across a tile's 16 queries */
#define TT_EU (8 / TT_U)          /* keys a trip of the softmax's exponentials: 8 vectors */
#define TT_SB 8                   /* keys a block of the softmax's and dsoftmax's float sums */

/* C[0..MR) × [0..NV vectors) = α Σ_k A[r·ars + k·acs] B[k·ldb + ·] (add: +=): the accumulators
 * stay in registers over k (MR·NV of them; GCC scalarises the array once the
 * loops are unrolled at constant bounds). The last vector masked when masked. */
TT_TARGET __attribute__((always_inline)) static inline void TT(blk)(const int MR, const int NV, const int masked, int K,
                                                                   float alpha, const float *A, int64_t ars,
                                                                   int64_t acs, const float *B, int64_t ldb, float *C,
                                                                   int64_t ldc, int add, M_T tail) {
    V acc[16][TT_NVMAX];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = V_ZERO();
    /* rows in groups of 4 from their own pointers, bumped along k: a row's float is
     * then a pointer plus 0, 1, 2 or 3 strides (four registers, not sixteen offsets) */
    const float *ag[4] = {A, MR > 4 ? A + 4 * ars : A, MR > 8 ? A + 8 * ars : A, MR > 12 ? A + 12 * ars : A};
    const int64_t s2 = 2 * ars, s3 = 3 * ars;
    for (int k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        V bv[TT_NVMAX];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = masked && v == NV - 1 ? V_LOADM(b + v * TT_W, tail) : V_LOAD(b + v * TT_W);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            const float *ap = ag[r / 4];
            const V ar = V_SET1(r % 4 == 0 ? ap[0] : r % 4 == 1 ? ap[ars] : r % 4 == 2 ? ap[s2] : ap[s3]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = V_FMA(ar, bv[v], acc[r][v]);
        }
        if (k + 1 < K)   /* not past A's last column */
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) ag[g] += acs;
    }
    const V al = V_SET1(alpha);
    /* C's rows in groups of 4 as A's: GCC otherwise made 16 row pointers a call and kept them on the stack */
    float *cg[4] = {C, MR > 4 ? C + 4 * ldc : C, MR > 8 ? C + 8 * ldc : C, MR > 12 ? C + 12 * ldc : C};
    const int64_t c2 = 2 * ldc, c3 = 3 * ldc;
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *cp = cg[r / 4];
            float *c = (r % 4 == 0 ? cp : r % 4 == 1 ? cp + ldc : r % 4 == 2 ? cp + c2 : cp + c3) + v * TT_W;
            const int m = masked && v == NV - 1;
            V x = alpha != 1.0f ? V_MUL(acc[r][v], al) : acc[r][v];
            if (add) x = V_ADD(m ? V_LOADM(c, tail) : V_LOAD(c), x);
            if (m) V_STOREM(c, tail, x);
            else V_STORE(c, x);
        }
}

/* All M rows of one column block of NV vectors: blocks of MRB rows, then 4, then 1. */
TT_TARGET __attribute__((always_inline)) static inline void TT(rows)(const int MRB, const int NV, const int masked,
                                                                    int M, int K, float alpha, const float *A,
                                                                    int64_t ars, int64_t acs, const float *B,
                                                                    int64_t ldb, float *C, int64_t ldc, int add,
                                                                    M_T tail) {
    int m = 0;
    for (; m + MRB <= M; m += MRB)
        TT(blk)(MRB, NV, masked, K, alpha, A + m * ars, ars, acs, B, ldb, C + m * ldc, ldc, add, tail);
    for (; m + 4 <= M; m += 4) TT(blk)(4, NV, masked, K, alpha, A + m * ars, ars, acs, B, ldb, C + m * ldc, ldc, add, tail);
    for (; m < M; m++) TT(blk)(1, NV, masked, K, alpha, A + m * ars, ars, acs, B, ldb, C + m * ldc, ldc, add, tail);
}

/* Each column-block width and mask its own function: inlined into one, the
 * blocks' loops shared GCC's register allocation, which then kept a B vector
 * on the stack in the 8×3 loop (reloaded for 8 of its 24 FMAs). */
#define TT_ROWS(NV, MSK)                                                                                            \
    TT_TARGET __attribute__((noinline)) static void TT(rows_##NV##_##MSK)(                                          \
        int M, int K, float alpha, const float *A, int64_t ars, int64_t acs, const float *B, int64_t ldb, float *C, \
        int64_t ldc, int add, M_T tail) {                                                                           \
        TT(rows)(TT_MR(NV), NV, MSK, M, K, alpha, A, ars, acs, B, ldb, C, ldc, add, tail);                          \
    }
TT_ROWS(1, 0)
TT_ROWS(1, 1)
TT_ROWS(2, 0)
TT_ROWS(2, 1)
#if TT_NVMAX > 2
TT_ROWS(3, 0)
TT_ROWS(3, 1)
#endif
#undef TT_ROWS
/* a tile wide (TT_U whole vectors: 16 floats, no mask) in blocks of 4 rows: the "-r4" copy's */
TT_TARGET __attribute__((noinline)) static void TT(rows4)(int M, int K, float alpha, const float *A, int64_t ars,
                                                         int64_t acs, const float *B, int64_t ldb, float *C,
                                                         int64_t ldc, int add, M_T tail) {
    TT(rows)(4, TT_U, 0, M, K, alpha, A, ars, acs, B, ldb, C, ldc, add, tail);
}

/* r4: products a tile wide (16 floats) in blocks of 4 rows (the "-r4" copy), not TT_MR(TT_U) */
TT_TARGET __attribute__((always_inline)) static inline void TT(gemm_)(const int r4, int M, int N, int K, float alpha,
                                                                     const float *A, int64_t ars, int64_t acs,
                                                                     const float *B, int64_t ldb, float *C,
                                                                     int64_t ldc, int add) {
#ifdef TG_TILE_FLOOR
    /* a diagnostic build (-DTG_TILE_FLOOR, wrong results): every product cut to at
     * most one k step, so a benchmark times what the op costs beside its FMAs
     * (docs/speed.md#the-attention-tiles) */
    K = K > 1 ? 1 : K;
#endif
    for (int n0 = 0, nv; n0 < N; n0 += nv * TT_W) {
        /* vectors left, in blocks of at most TT_NVMAX; never a block of one
         * behind others (4 vectors as 2 + 2, not 3 + 1) */
        const int left = N - n0, vl = (left + TT_W - 1) / TT_W;
        nv = vl <= TT_NVMAX ? vl : vl == TT_NVMAX + 1 ? (vl + 1) / 2 : TT_NVMAX;
        const int rem = left - (nv - 1) * TT_W, masked = rem < TT_W;
        const M_T tail = M_FIRST(masked ? rem : TT_W);
        const float *b = B + n0;
        float *c = C + n0;
        if (r4 && N == TG_TILE_Q) {   /* the product a tile wide, not a block of a wider one */
            TT(rows4)(M, K, alpha, A, ars, acs, b, ldb, c, ldc, add, tail);   /* called directly: see docs/speed.md */
            break;
        }
        switch (nv * 2 + masked) {
#define TT_CASE(NV)                                                                           \
    case NV * 2: TT(rows_##NV##_0)(M, K, alpha, A, ars, acs, b, ldb, c, ldc, add, tail); break; \
    case NV * 2 + 1: TT(rows_##NV##_1)(M, K, alpha, A, ars, acs, b, ldb, c, ldc, add, tail); break;
            TT_CASE(1)
            TT_CASE(2)
#if TT_NVMAX > 2
            TT_CASE(3)
#endif
#undef TT_CASE
        }
    }
}

TT_TARGET static void TT(gemm)(int M, int N, int K, float alpha, const float *A, int64_t ars, int64_t acs,
                               const float *B, int64_t ldb, float *C, int64_t ldc, int add) {
    TT(gemm_)(0, M, N, K, alpha, A, ars, acs, B, ldb, C, ldc, add);
}
TT_TARGET static void TT(gemm_r4)(int M, int N, int K, float alpha, const float *A, int64_t ars, int64_t acs,
                                  const float *B, int64_t ldb, float *C, int64_t ldc, int add) {
    TT(gemm_)(1, M, N, K, alpha, A, ars, acs, B, ldb, C, ldc, add);
}

/* tg_exp_neg_fma (vmath.h), operation for operation */
TT_TARGET __attribute__((always_inline)) static inline V TT(exp_neg)(V x) {
    const V shift = V_SET1(12582912.0f);
    const M_T special = V_NGE(x, V_SET1(-87.0f));   /* below −87, or NaN */
    const V xc = V_MAX(x, V_SET1(-87.0f));         /* −87 for x below it and for NaN (max takes its second operand) */
    const V n = V_SUB(V_FMA(xc, V_SET1(1.44269504f), shift), shift);
    const V r = V_FNMA(n, V_SET1(-2.12194440e-4f), V_FNMA(n, V_SET1(0.693359375f), xc));
    V p = V_SET1(1.0f / 5040);
    p = V_FMA(p, r, V_SET1(1.0f / 720));
    p = V_FMA(p, r, V_SET1(1.0f / 120));
    p = V_FMA(p, r, V_SET1(1.0f / 24));
    p = V_FMA(p, r, V_SET1(1.0f / 6));
    p = V_FMA(p, r, V_SET1(0.5f));
    p = V_FMA(p, r, V_SET1(1.0f));
    p = V_FMA(p, r, V_SET1(1.0f));
    /* the specials by one compare and one blend: max(+0, x) is +0 below −87 and x
     * itself for NaN (the second operand again), as tg_exp_neg_fma's two selects */
    return V_SEL(special, V_MAX(V_ZERO(), x), V_SCALE(p, n));
}

/* x = e^{x − m} in place, added to the key parity's float sum f */
TT_TARGET __attribute__((always_inline)) static inline void TT(exp_sum)(float *x, V m, V *f) {
    const V y = TT(exp_neg)(V_SUB(V_LOAD(x), m));
    V_STORE(x, y);
    *f = V_ADD(*f, y);
}

/* A block's float sums f[2] (even and odd keys) added to the double sums s[2][2] (low and high halves) */
TT_TARGET __attribute__((always_inline)) static inline void TT(flush)(VD s[2][2], const V *f) {
#pragma GCC unroll 2
    for (int e = 0; e < 2; e++) {
        s[e][0] = VD_ADD(s[e][0], VD_LO(f[e]));
        s[e][1] = VD_ADD(s[e][1], VD_HI(f[e]));
    }
}

/* Three passes over the tile, each a vector per key and TT_U per row of keys:
 * the logits and their max, e^{x − m} and its sum, the weights. Between them
 * the lanes' scalars, in vectors too. The sum runs by blocks of TT_SB keys: in
 * float within a block, even and odd keys apart, each block's two sums then
 * added in double (a float per key converted and added in double cost 6% of
 * the forward at `small` on an AMD EPYC Zen 4, AVX-512, docs/speed.md); the
 * plain copy in attn_tile.c keeps this order. */
TT_TARGET static void TT(softmax)(float *S, int64_t lds, int nk, int k0, const int *lo, const int *hi, int raw, float s,
                                  float sink, float *top, float *psink) {
    V mx[TT_U], m[TT_U];
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) mx[u] = V_SET1(-INFINITY);
    const V sv = V_SET1(s), ninf = V_SET1(-INFINITY), sinkv = V_SET1(sink);
    VI lov[TT_U], hiv[TT_U];   /* in registers: S's stores might alias lo and hi, so GCC reloads them a key */
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) {   /* read when raw only */
        lov[u] = raw ? VI_LOAD(lo + u * TT_W) : VI_SET1(0);
        hiv[u] = raw ? VI_LOAD(hi + u * TT_W) : VI_SET1(0);
    }
    for (int j = 0; j < nk; j++) {
        const VI jv = VI_SET1(k0 + j);
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) {
            float *x = S + j * lds + u * TT_W;
            V v = V_LOAD(x);
            if (raw) {
                v = V_SEL(VI_IN(lov[u], hiv[u], jv), V_MUL(v, sv), ninf);
                V_STORE(x, v);
            }
            mx[u] = V_MAX(v, mx[u]);   /* a NaN in v: mx kept (the max skips NaN, as tg_row_max) */
        }
    }
    M_T empty[TT_U];   /* no finite logit and no sink: e^{−inf − 0} = 0 */
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) {
        const V t = V_MAX(mx[u], sinkv);
        empty[u] = V_EQ(t, ninf);
        m[u] = V_SEL(empty[u], V_ZERO(), t);
    }
    VD sum[TT_U][2][2];
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) sum[u][0][0] = sum[u][0][1] = sum[u][1][0] = sum[u][1][1] = VD_ZERO();
    int j = 0;
    /* a block TT_EU keys a trip, their exponentials first: eight vectors of
     * independent chains (each ~25 dependent operations) in flight, where one
     * key's chain then its sum, two keys a trip, kept too few (docs/speed.md) */
    for (; j + TT_SB <= nk; j += TT_SB) {
        V f[TT_U][2];
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) f[u][0] = f[u][1] = V_ZERO();
#pragma GCC unroll 2
        for (int h = 0; h < TT_SB; h += TT_EU) {
            V y[TT_EU][TT_U];
#pragma GCC unroll 8
            for (int e = 0; e < TT_EU; e++)
#pragma GCC unroll 4
                for (int u = 0; u < TT_U; u++)
                    y[e][u] = TT(exp_neg)(V_SUB(V_LOAD(S + (j + h + e) * lds + u * TT_W), m[u]));
#pragma GCC unroll 8
            for (int e = 0; e < TT_EU; e++)
#pragma GCC unroll 4
                for (int u = 0; u < TT_U; u++) {
                    V_STORE(S + (j + h + e) * lds + u * TT_W, y[e][u]);
                    f[u][e & 1] = V_ADD(f[u][e & 1], y[e][u]);
                }
        }
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) TT(flush)(sum[u], f[u]);
    }
    if (j < nk) {   /* the last block's keys, two a trip (the parities at constant indices, in registers) */
        V f[TT_U][2];
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) f[u][0] = f[u][1] = V_ZERO();
        for (; j + 2 <= nk; j += 2)
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++)
#pragma GCC unroll 4
                for (int u = 0; u < TT_U; u++) TT(exp_sum)(S + (j + e) * lds + u * TT_W, m[u], &f[u][e]);
        if (j < nk)   /* j is even */
#pragma GCC unroll 4
            for (int u = 0; u < TT_U; u++) TT(exp_sum)(S + j * lds + u * TT_W, m[u], &f[u][0]);
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) TT(flush)(sum[u], f[u]);
    }
    V inv[TT_U];
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) {
        VD z0 = VD_ADD(sum[u][0][0], sum[u][1][0]), z1 = VD_ADD(sum[u][0][1], sum[u][1][1]);
        V es = V_ZERO();
        if (sink > -INFINITY) {
            es = TT(exp_neg)(V_SUB(sinkv, m[u]));
            z0 = VD_ADD(z0, VD_LO(es));
            z1 = VD_ADD(z1, VD_HI(es));
        }
        const VD one = VD_SET1(1.0);
        const V r = VD_TO_V(VD_DIV(one, z0), VD_DIV(one, z1));
        const M_T nan = V_NAN(r);
        inv[u] = V_SEL(M_ANDN(nan, empty[u]), V_ZERO(), r);   /* empty: 0, or NaN where a logit is NaN */
        V_STORE(top + u * TT_W, V_SEL(M_AND(nan, empty[u]), r, mx[u]));
        if (psink) {
            const V p = VD_TO_V(VD_DIV(VD_LO(es), z0), VD_DIV(VD_HI(es), z1));
            V_STORE(psink + u * TT_W, V_SEL(empty[u], V_ZERO(), p));
        }
    }
    for (int jj = 0; jj < nk; jj++)
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) {
            float *x = S + jj * lds + u * TT_W;
            V_STORE(x, V_MUL(V_LOAD(x), inv[u]));
        }
}

/* Y[c·ldy + r] = X[r·ldx + c], r < rows, c < cols: TT_W × TT_W blocks transposed in registers, the edges plain */
TT_TARGET static void TT(transpose)(const float *X, int64_t ldx, int rows, int cols, float *Y, int64_t ldy) {
    int r0 = 0;
    for (; r0 + TT_W <= rows; r0 += TT_W) {
        int c0 = 0;
        for (; c0 + TT_W <= cols; c0 += TT_W) {
            V r[TT_W];
#pragma GCC unroll 16
            for (int t = 0; t < TT_W; t++) r[t] = V_LOAD(X + (r0 + t) * ldx + c0);
            V_TRANSPOSE(r);
#pragma GCC unroll 16
            for (int t = 0; t < TT_W; t++) V_STORE(Y + (c0 + t) * ldy + r0, r[t]);
        }
        for (int c = c0; c < cols; c++)
            for (int t = 0; t < TT_W; t++) Y[c * ldy + r0 + t] = X[(r0 + t) * ldx + c];
    }
    for (int r = r0; r < rows; r++)
        for (int c = 0; c < cols; c++) Y[c * ldy + r] = X[r * ldx + c];
}

/* The softmax's backward on a key-major tile: per lane D = Σ_j P·dP (by blocks of
 * TT_SB keys, as the softmax's sum: FMAs in float within a block, even and odd
 * keys apart, then the block's two sums added in double), then dS = P ⊙ (dP − D)
 * in place of dP; D[a] out. */
TT_TARGET static void TT(dsoftmax)(float *G, const float *P, int64_t ld, int nk, float *D) {
    VD sum[TT_U][2][2];
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) sum[u][0][0] = sum[u][0][1] = sum[u][1][0] = sum[u][1][1] = VD_ZERO();
    for (int j0 = 0; j0 < nk; j0 += TT_SB) {
        const int j1 = j0 + TT_SB < nk ? j0 + TT_SB : nk;
        V f[TT_U][2];
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) f[u][0] = f[u][1] = V_ZERO();
        int j = j0;
        for (; j + 2 <= j1; j += 2)
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++)
#pragma GCC unroll 4
                for (int u = 0; u < TT_U; u++)
                    f[u][e] = V_FMA(V_LOAD(P + (j + e) * ld + u * TT_W), V_LOAD(G + (j + e) * ld + u * TT_W), f[u][e]);
        if (j < j1)   /* j is even */
#pragma GCC unroll 4
            for (int u = 0; u < TT_U; u++) f[u][0] = V_FMA(V_LOAD(P + j * ld + u * TT_W), V_LOAD(G + j * ld + u * TT_W), f[u][0]);
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) TT(flush)(sum[u], f[u]);
    }
    V dv[TT_U];
#pragma GCC unroll 4
    for (int u = 0; u < TT_U; u++) {
        dv[u] = VD_TO_V(VD_ADD(sum[u][0][0], sum[u][1][0]), VD_ADD(sum[u][0][1], sum[u][1][1]));
        V_STORE(D + u * TT_W, dv[u]);
    }
    for (int j = 0; j < nk; j++)
#pragma GCC unroll 4
        for (int u = 0; u < TT_U; u++) {
            float *g = G + j * ld + u * TT_W;
            V_STORE(g, V_MUL(V_LOAD(P + j * ld + u * TT_W), V_SUB(V_LOAD(g), dv[u])));
        }
}

#ifdef TG_TILE_FLOOR
#define TT_FLOOR "-floor"   /* every line a benchmark prints then says so */
#else
#define TT_FLOOR ""
#endif
static const tg_tile_ops TT(ops) = {TT_NAME TT_FLOOR, TT(gemm), TT(softmax), TT(dsoftmax), TT(transpose)};
static const tg_tile_ops TT(ops_r4) = {TT_NAME "-r4" TT_FLOOR, TT(gemm_r4), TT(softmax), TT(dsoftmax), TT(transpose)};
#undef TT_FLOOR

#undef TT_U
#undef TT_EU
#undef TT_SB
